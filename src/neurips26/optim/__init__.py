"""neurips26.optim: methods of this area, one paper per module (see neurips26.registry)."""
