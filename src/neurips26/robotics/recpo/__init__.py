"""RecPo: reconfigurable procedures from local transition relations.

Paper
-----
RecPo (seed ``000_f8b4140a0e3b5d84.txt``, paragraph beginning "General-purpose behavior models
increasingly internalize broad"); no public version was found, so every structural choice beyond the
abstract follows the spec's reconstruction (``../shared/specs/recpo.md``) and is inferred.

Method
------
A robot adapts to a new task by
*reconfiguring* skills it has: executed skills are stored task-agnostically as local transition relations
in several procedure views (object state, spatial relations, interaction interface), a single
demonstration is read through the same views into a compositional query, and the query is resolved
against the knowledge base into an executable skill sequence, inserting enabling skills whose effects
establish unmet preconditions.

.. math::

    \\text{plan} = \\operatorname{resolve}\\big(\\operatorname{interpret}(o_{1:T}^{\\text{demo}}),\\;
    \\phi(o_{\\text{now}}),\\; \\mathcal{K}\\big), \\qquad
    \\mathcal{K} = \\{(v, \\rho(\\Delta_v), \\sigma, \\text{pre}) \\}.

Modules
-------
- :mod:`.kitchen`: :class:`ExtendedKitchen` (Gymnasium, ``neurips26/ExtendedKitchen-v0``), layout/goals/threshold
  from gymnasium-robotics' FrankaKitchen-v1, :func:`oracle_plan`.
- :mod:`.views`: :class:`ProcedureView`, :class:`ObjectStateView`, :class:`SpatialRelationView`,
  :class:`InterfaceView`, :class:`LearnedView`, :class:`Change`.
- :mod:`.core`: :class:`ProcedureKnowledgeBase`, :class:`TransitionRelation`, :class:`DemoInterpreter`,
  :class:`RecPoResolver`, :class:`RecPoAgent`, :class:`UnresolvableQueryError`,
  :func:`ordered_subtask_completion`.
- :mod:`.bench`: training compositions, held-out tasks, demonstrations, and the baselines
  :class:`WholeCompositionRetrieval`, :class:`FullStateSkillRetrieval`, :class:`OraclePlanner`.
- :mod:`.mujoco_skills` (imported on demand; needs mujoco): scripted joint-space primitives that run
  ``turn_on(light switch)`` and ``open(microwave)`` of a RecPo plan in MuJoCo FrankaKitchen-v1.

Shapes
------
- observation ``(30,)`` (FrankaKitchen ``qpos`` layout); demonstration ``(T, 30)``.
"""

from neurips26.robotics.recpo.bench import (
    HELD_OUT_SKILLS,
    FullStateSkillRetrieval,
    KitchenTask,
    OraclePlanner,
    WholeCompositionRetrieval,
    edit_distance,
    heldout_tasks,
    record_demonstration,
    replay,
    training_compositions,
    view_training_data,
)
from neurips26.robotics.recpo.core import (
    ChangeSignature,
    CompositionalQuery,
    DemoInterpreter,
    EpisodeResult,
    PlanStep,
    ProcedureKnowledgeBase,
    RecPoAgent,
    RecPoResolver,
    Segment,
    SegmentedEpisode,
    TransitionRelation,
    UnresolvableQueryError,
    labels_of,
    ordered_subtask_completion,
)
from neurips26.robotics.recpo.kitchen import (
    ENV_ID,
    SKILLS,
    ExtendedKitchen,
    SkillCall,
    anchor,
    element_value,
    franka_constants,
    oracle_plan,
    register_env,
    task_completed,
    transition,
)
from neurips26.robotics.recpo.views import (
    Change,
    InterfaceView,
    LearnedView,
    ObjectStateView,
    ProcedureView,
    SpatialRelationView,
    default_views,
)

register_env()

__all__ = [
    "ENV_ID",
    "HELD_OUT_SKILLS",
    "SKILLS",
    "Change",
    "ChangeSignature",
    "CompositionalQuery",
    "DemoInterpreter",
    "EpisodeResult",
    "ExtendedKitchen",
    "FullStateSkillRetrieval",
    "InterfaceView",
    "KitchenTask",
    "LearnedView",
    "ObjectStateView",
    "OraclePlanner",
    "PlanStep",
    "ProcedureKnowledgeBase",
    "ProcedureView",
    "RecPoAgent",
    "RecPoResolver",
    "Segment",
    "SegmentedEpisode",
    "SkillCall",
    "SpatialRelationView",
    "TransitionRelation",
    "UnresolvableQueryError",
    "WholeCompositionRetrieval",
    "anchor",
    "default_views",
    "edit_distance",
    "element_value",
    "franka_constants",
    "heldout_tasks",
    "labels_of",
    "oracle_plan",
    "ordered_subtask_completion",
    "record_demonstration",
    "register_env",
    "replay",
    "task_completed",
    "training_compositions",
    "transition",
    "view_training_data",
]
