"""neurips26.graph: methods of this area, one paper per module (see neurips26.registry)."""
