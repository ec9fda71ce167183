"""neurips26.temporal: methods of this area, one paper per module (see neurips26.registry)."""
