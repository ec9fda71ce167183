"""Testbeds shared by claim checks: data, models and training or evaluation protocols that are not a paper's
component (issue 36 item 1).

A testbed module sits between the areas and the claims: it may import :mod:`neurips26.common` and the areas'
components, never :mod:`neurips26.claims`; claims import testbeds, so no claim imports another claim's code.

- :mod:`neurips26.testbeds.agent_games`: KeyDoorGrid and TextWorld games, a behaviour-cloned tiny-Llama start
  and step-level PPO arms (the RewardFlow and AEM claims).
- :mod:`neurips26.testbeds.residual_mlp`: a residual MLP classifier wired by a pluggable connector (the ANCRe
  claim's digits experiment).
- :mod:`neurips26.testbeds.text_diffusion`: KJV character text, a Kneser-Ney evaluator and a bidirectional
  transformer denoiser for masked-diffusion LMs (the DLM-Distill claim).
"""
