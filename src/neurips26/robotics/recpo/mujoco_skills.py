"""Scripted joint-space skill primitives that execute RecPo plans in the MuJoCo FrankaKitchen-v1 (stretch goal).

Each primitive is a sequence of end-effector waypoints (position + orientation of the ``end_effector`` site);
every waypoint is turned into a 7-D arm joint target by damped-least-squares inverse kinematics on a scratch
copy of the simulator state,

.. math::

    \\Delta q = J^\\top (J J^\\top + \\lambda I)^{-1} e, \\qquad e = [p^* - p;\\; \\tfrac12 \\textstyle\\sum_i R_{:,i}
    \\times R^*_{:,i}],

and tracked through the environment's own action space (joint velocities ``(q^* - q) / (2 dt)`` clipped to
``[-1, 1]``), with a few outer corrections for the tracking offset under load. Only two skills are scripted:
``turn_on(light switch)`` (push the switch lever sideways with the closed gripper) and ``open(microwave)``
(hook the fingers behind the handle and pull along the door's arc with closed-loop re-grasping). The
microwave skill ends with the hand still hooked on the handle: releasing it was found to push the door back
(about -0.64 rad -> -0.41 rad, outside FrankaKitchen's threshold), so it is not released.

Shapes
------
- arm joint target ``(7,)``; action ``(9,)`` (FrankaKitchen-v1's joint-velocity actions).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from neurips26.common.optional import require
from neurips26.robotics.recpo.kitchen import SkillCall

SCRIPTED = (SkillCall("turn_on", ("light switch",)), SkillCall("open", ("microwave",)))


def _rotz(t: float) -> np.ndarray:
    c, s = np.cos(t), np.sin(t)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


class FrankaKitchenPrimitives:
    """Execute :class:`SkillCall` s of :data:`SCRIPTED` in a FrankaKitchen-v1 environment.

    Parameters
    ----------
    seed : int
        Reset seed of the environment (noise ratios are 0, so the rollout is deterministic).
    """

    def __init__(self, seed: int = 0) -> None:
        os.environ.setdefault("MUJOCO_GL", "disable")
        gym = require("gymnasium", "robotics")
        robotics = require("gymnasium_robotics", "robotics")
        self.mujoco = require("mujoco", "robotics")
        gym.register_envs(robotics)
        self.env = gym.make(
            "FrankaKitchen-v1", object_noise_ratio=0.0, robot_noise_ratio=0.0, max_episode_steps=100_000
        )
        self.env.reset(seed=seed)
        u = self.env.unwrapped
        self.model, self.data = u.model, u.data
        self.ee = self.model.site("end_effector").id
        self.scratch = self.mujoco.MjData(self.model)
        self.R_home = self.data.site_xmat[self.ee].reshape(3, 3).copy()
        self.dt = float(u.robot_env.dt)
        self.info: dict[str, Any] = {"episode_task_completions": [], "tasks_to_complete": []}
        self.steps = 0

    # ------------------------------------------------------------------ control
    def _ik(self, target: np.ndarray, R_des: np.ndarray, iters: int = 300) -> np.ndarray:
        m, s = self.model, self.scratch
        s.qpos[:] = self.data.qpos
        jp, jr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
        for _ in range(iters):
            self.mujoco.mj_fwdPosition(m, s)
            R = s.site_xmat[self.ee].reshape(3, 3)
            rot = 0.5 * sum(np.cross(R[:, i], R_des[:, i]) for i in range(3))
            e = np.concatenate([target - s.site_xpos[self.ee], rot])
            if np.linalg.norm(e) < 1e-4:
                break
            self.mujoco.mj_jacSite(m, s, jp, jr, self.ee)
            J = np.vstack([jp[:, :7], jr[:, :7]])
            s.qpos[:7] += np.clip(J.T @ np.linalg.solve(J @ J.T + 1e-4 * np.eye(6), e), -0.1, 0.1)
        return s.qpos[:7].copy()

    def move(
        self, target, grip: float, R_des=None, steps: int = 30, corrections: int = 3, tol: float = 0.005
    ):
        """Track an end-effector pose; ``grip`` is the finger opening per finger (0 = closed, 0.04 = open)."""
        target = np.asarray(target, dtype=float)
        R_des = self.R_home if R_des is None else R_des
        offset = np.zeros(3)
        for _ in range(corrections):
            q_target = self._ik(target + offset, R_des)
            for _ in range(steps // corrections + 1):
                a = np.zeros(9)
                a[:7] = np.clip((q_target - self.data.qpos[:7]) / (2 * self.dt), -1, 1)
                a[7:] = np.clip((grip - self.data.qpos[7:9]) / (2 * self.dt), -1, 1)
                _, _, _, _, self.info = self.env.step(a)
                self.steps += 1
            offset += np.clip(target - self.data.site_xpos[self.ee], -0.05, 0.05)
            if np.linalg.norm(self.data.site_xpos[self.ee] - target) < tol:
                break

    # ------------------------------------------------------------------ skills
    def turn_on_light(self) -> None:
        tip = self.data.site("light_site").xpos.copy() + np.array([-0.006, 0.009, 0.015])
        for wp in [tip + [0.08, -0.12, 0.0], tip + [0.06, 0.0, 0.0]] + [
            tip + [0.06 - 0.015 * k, 0.0, 0.0] for k in range(1, 12)
        ]:
            self.move(wp, 0.0, corrections=5)
        self.move(tip + [-0.12, -0.15, 0.0], 0.0)

    def open_microwave(self, max_pulls: int = 60) -> None:
        d = self.data
        h = d.site("microhandle_site").xpos.copy()
        anchor = d.xanchor[self.model.joint("microwave").id].copy()
        door = float(np.arctan2(0.3, 0.96))  # the microwave body is yawed by about 0.30 rad in the scene
        n = _rotz(door) @ np.array([0.0, 1.0, 0.0])  # approach direction, into the door
        R_g = _rotz(door) @ self.R_home
        r = h - anchor

        def handle_at(th):
            return anchor + _rotz(th) @ r

        for wp, g in (
            (h - 0.15 * n, 0.04),
            (h - 0.08 * n, 0.04),
            (h + 0.025 * n, 0.04),
            (h + 0.025 * n, 0.0),
        ):
            self.move(wp, g, R_des=R_g, corrections=4)
        for _ in range(max_pulls):
            q = float(d.qpos[22])
            if q < -0.6:
                break
            hc = d.site("microhandle_site").xpos.copy()
            nq = _rotz(q) @ n
            if np.linalg.norm(d.site_xpos[self.ee] - hc) > 0.045:  # lost the handle: back off and hook again
                for wp, g in (
                    (d.site_xpos[self.ee] - 0.06 * nq, 0.04),
                    (hc - 0.08 * nq, 0.04),
                    (hc + 0.025 * nq, 0.04),
                    (hc + 0.025 * nq, 0.0),
                ):
                    self.move(wp, g, R_des=_rotz(q) @ R_g, corrections=3)
                continue
            target = handle_at(q - 0.1) + 0.025 * (_rotz(q - 0.1) @ n)
            self.move(target, 0.0, R_des=_rotz(0.5 * (q - 0.1)) @ R_g, corrections=2, steps=12)

    def execute(self, call: SkillCall) -> dict[str, Any]:
        """Run one scripted skill; returns FrankaKitchen's info after it."""
        if call == SCRIPTED[0]:
            self.turn_on_light()
        elif call == SCRIPTED[1]:
            self.open_microwave()
        else:
            raise ValueError(
                f"call must be one of the scripted MuJoCo skills {[str(s) for s in SCRIPTED]}, got {call}"
            )
        return dict(self.info)

    def run_plan(self, calls: Sequence[SkillCall]) -> dict[str, Any]:
        """Execute ``calls``; returns the joint values reached, FrankaKitchen's completion events and whether each
        element satisfies FrankaKitchen's predicate at the end."""
        from neurips26.robotics.recpo.kitchen import task_completed

        for call in calls:
            self.execute(call)
        q = self.data.qpos.copy()
        return {
            "episode_task_completions": list(self.info.get("episode_task_completions", [])),
            "final_completed": [e for e in ("light switch", "microwave") if task_completed(q, e)],
            "light_switch_q": q[17:19].tolist(),
            "microwave_q": float(q[22]),
            "env_steps": self.steps,
        }
