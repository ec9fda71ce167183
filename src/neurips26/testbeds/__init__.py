"""Testbeds shared by claim checks: data, models and training or evaluation protocols that are not a paper's
component (issue 36 item 1).

A testbed module sits between the areas and the claims: it may import :mod:`neurips26.common` and the areas'
components, never :mod:`neurips26.claims`; claims import testbeds, so no claim imports another claim's code.
Each module's docstring names the claim checks that use it. This file lists no module on purpose: every claim
result is hashed on the source of the modules it imports, this package file included, so adding a testbed
must not change it.
"""
