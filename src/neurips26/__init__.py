"""neurips26: NeurIPS 2026 methods as tested PyTorch components, each proven by a claim check.

Importing the package stays light: no torch import happens here. Components live in
``neurips26.<area>.<method>``; the table of all methods is :mod:`neurips26.registry`.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
