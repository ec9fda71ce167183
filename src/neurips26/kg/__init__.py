"""neurips26.kg: methods of this area, one paper per module (see neurips26.registry)."""
