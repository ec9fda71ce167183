"""neurips26.distributed: methods of this area, one paper per module (see neurips26.registry).

Every component is importable from here, e.g. ``from neurips26.distributed import <Name>``; the module that
defines it is imported on first use.
"""

from neurips26.registry import area_exports as _area_exports

__getattr__, __dir__, __all__ = _area_exports(__name__)
