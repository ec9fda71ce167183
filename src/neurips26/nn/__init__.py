"""neurips26.nn: methods of this area, one paper per module (see neurips26.registry)."""
