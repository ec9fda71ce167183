"""A Flower strategy from a paper: FedRevive's server rule as a ``flwr`` ``FedAvg`` subclass, 2 rounds.

Paper: *FedRevive* (NeurIPS 2026, arXiv 2511.00655; registry slug ``fedrevive``): asynchronous federated
learning that buffers client updates (FedBuff) and revives stale ones with a server-side data-free
multi-teacher distillation step, ``w <- w + eta_g [(1 - beta_bar) Delta_raw + beta_bar Delta_KD]`` where
the revival weight ``beta_bar`` grows with the updates' staleness and is 0 for fresh updates.

What it shows: the Flower app a practitioner writes -- a ``ClientApp`` whose ``train`` handler fits a
logistic regression on its own partition (client ``i`` holds ``40 (i + 1)`` samples) and a
``ServerApp`` whose main calls ``strategy.start(grid=..., initial_arrays=..., num_rounds=2)`` -- with
``AsyncFedAvg(rule=FedRevive(...))`` as the strategy (a subclass of ``flwr.serverapp.strategy.FedAvg``).
The client echoes the ``base-version`` it received in its metrics; that is how the strategy measures
staleness.

1. **Round-based** (Flower's loop, FedRevive's semi-asynchronous adapter): every round delivers fresh
   updates, so the revival weight is 0 and the aggregate must equal FedAvg's sample-weighted mean of
   the client models. The script checks it against a hand computation (the clients' deterministic local
   training replayed in this process) and against Flower's own ``FedAvg`` on the same apps.
2. **Asynchronous** (what FedRevive is for): ``run_async`` sends one Flower TRAIN message per job through
   the Grid's message API and pulls each reply when a simulated clock (log-normal job durations, one slow
   client) says it arrives; the server steps every 2 arrivals, so some updates are stale, get a revival
   weight > 0 and are distilled on the server (data free, from a conditional generator).

Engines: ``engine="simulation"`` runs the apps on Flower's simulation engine
(``flwr.simulation.run_simulation``, Ray actors; every run starts Ray, over a minute each on a loaded
2-core machine, so the fast test does not use it); ``engine="inprocess"`` (the default) runs the very
same ``ServerApp`` body and ``ClientApp`` through ``neurips26.federated.flower.LocalGrid``, an in-process
``flwr`` ``Grid`` that executes the ClientApp when a reply is pulled (no Ray; Flower itself ships no
in-process grid).

Run: ``python examples/flower_fedrevive.py`` (in-process) or
``python examples/flower_fedrevive.py simulation``.
"""

from __future__ import annotations

import sys

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from torch import nn

from neurips26.federated.fedrevive import ClientSpeedModel, FedRevive, revival_weight
from neurips26.federated.fedrevive.flower import AsyncFedAvg, run_async
from neurips26.federated.flower import LocalGrid, local_identity, quiet_flower

NUM_CLIENTS = 3
NUM_ROUNDS = 2
FEATURES = 8


def make_model() -> nn.Module:
    return nn.Linear(FEATURES, 2)


def client_data(partition: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Client ``partition``'s local data: ``40 (partition + 1)`` points, a client-specific shift."""
    g = torch.Generator().manual_seed(1000 * seed + partition)
    n = 40 * (partition + 1)
    x = torch.randn(n, FEATURES, generator=g) + 0.5 * partition
    y = (x[:, 0] + x[:, 1] > 0.5 * partition).long()
    return x, y


def local_train(state: dict, partition: int, seed: int) -> tuple[dict, int, float]:
    """Five full-batch SGD steps from ``state`` (deterministic); returns (new state, samples, loss)."""
    x, y = client_data(partition, seed)
    model = make_model()
    model.load_state_dict(state)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(5):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, len(x), float(loss.detach())


def make_client_app(seed: int) -> ClientApp:
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        partition = int(context.node_config["partition-id"])
        state = msg.content["arrays"].to_torch_state_dict()
        config = msg.content["config"]
        new_state, n, loss = local_train(state, partition, seed)
        metrics = MetricRecord(
            {
                "num-examples": n,  # FedAvg's weighting key
                "client-id": partition,
                "base-version": int(config.get("base-version", 0)),  # AsyncFedAvg measures staleness with it
                "train-loss": loss,
            }
        )
        return Message(RecordDict({"arrays": ArrayRecord(new_state), "metrics": metrics}), reply_to=msg)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        # the asynchronous transport asks every node once which data partition it holds
        partition = int(context.node_config["partition-id"])
        return Message(RecordDict({"metrics": MetricRecord({"partition-id": partition})}), reply_to=msg)

    return app


def server_main(grid: Grid, strategy: FedAvg, initial: dict, out: dict) -> None:
    """The ServerApp's body: ``NUM_ROUNDS`` rounds of ``strategy`` on ``grid``."""
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(initial), num_rounds=NUM_ROUNDS)
    out["state"] = result.arrays.to_torch_state_dict()


def make_server_app(strategy: FedAvg, initial: dict, out: dict) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        server_main(grid, strategy, initial, out)

    return app


def ship_this_module_to_ray() -> None:
    """Let Ray's workers unpickle this file's ClientApp when the file was imported by path (as the tests
    do) rather than run as a script: Ray then sends the module's code by value instead of by name."""
    if __name__ != "__main__":
        from ray import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])


def run(strategy: FedAvg, initial: dict, seed: int, engine: str) -> dict:
    """Run the ServerApp + ClientApp pair on the chosen engine; the final global ``state_dict``."""
    out: dict = {}
    client = make_client_app(seed)
    with quiet_flower():
        if engine == "simulation":
            from flwr.simulation import run_simulation

            ship_this_module_to_ray()
            run_simulation(
                make_server_app(strategy, initial, out),
                client,
                num_supernodes=NUM_CLIENTS,
                backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}},
            )
        elif engine == "inprocess":
            with local_identity():  # Flower's message ids need a run and node identity
                server_main(LocalGrid(client, NUM_CLIENTS), strategy, initial, out)
        else:
            raise ValueError(f"engine must be 'inprocess' or 'simulation', got {engine!r}")
    if "state" not in out:
        raise RuntimeError("the Flower run ended without a result (see Flower's log)")
    return out["state"]


def main(seed: int = 0, engine: str = "inprocess") -> dict:
    """Two rounds of FedRevive (as ``AsyncFedAvg``) and of Flower's ``FedAvg`` on the same Flower apps.

    Returns
    -------
    dict
        ``max_diff_vs_hand_fedavg`` (largest absolute difference between FedRevive's final weights and the
        sample-weighted mean replayed by hand), ``max_diff_vs_flwr_fedavg`` (same against Flower's
        ``FedAvg``), ``server_steps`` (FedRevive server steps), ``mean_staleness``, ``revival_weight``
        (the largest ``beta(tau)`` over the updates received; 0 when every update is fresh),
        ``client_samples``, ``engine``; and for the asynchronous run: ``async_staleness`` (per arriving
        update), ``async_revival_weight`` (largest ``beta(tau)``), ``async_kd_steps`` (distillation steps
        the server ran), ``async_loss`` (pooled loss of the global model after every server step, the
        first entry before training).
    """
    torch.manual_seed(seed)
    initial = {k: v.clone() for k, v in make_model().state_dict().items()}
    kw = dict(min_train_nodes=NUM_CLIENTS, min_available_nodes=NUM_CLIENTS, fraction_evaluate=0.0)

    rule = FedRevive(num_classes=2, input_shape=(FEATURES,), buffer_size=NUM_CLIENTS, seed=seed)
    revive = AsyncFedAvg(rule, make_model, initial_state=initial, **kw)
    state_revive = run(revive, initial, seed, engine)
    state_fedavg = run(FedAvg(**kw), initial, seed, engine)

    # the same two rounds by hand: every client trains from the global model, then the weighted mean
    expected = initial
    for _ in range(NUM_ROUNDS):
        results = [local_train(expected, c, seed) for c in range(NUM_CLIENTS)]
        total = sum(n for _, n, _ in results)
        expected = {k: sum(s[k] * (n / total) for s, n, _ in results) for k in expected}

    diff_hand = max(float((state_revive[k] - expected[k]).abs().max()) for k in expected)
    diff_flwr = max(float((state_revive[k] - state_fedavg[k]).abs().max()) for k in expected)
    beta = float(
        revival_weight(torch.tensor(rule.staleness, dtype=torch.float64), rule.beta_max, rule.beta_exp).max()
    )
    result = {
        "engine": engine,
        "server_steps": int(rule.server_steps),
        "mean_staleness": sum(rule.staleness) / max(len(rule.staleness), 1),
        "revival_weight": beta,
        "client_samples": [len(client_data(c, seed)[0]) for c in range(NUM_CLIENTS)],
        "max_diff_vs_hand_fedavg": diff_hand,
        "max_diff_vs_flwr_fedavg": diff_flwr,
    }
    print(
        f"engine {engine}: {NUM_CLIENTS} clients with {result['client_samples']} samples, {NUM_ROUNDS} rounds"
    )
    print(
        f"FedRevive server steps {result['server_steps']}, mean staleness {result['mean_staleness']:.1f}, "
        f"revival weight {beta:.2f}"
    )
    print(
        f"max |FedRevive - weighted mean by hand| = {diff_hand:.1e}; max |FedRevive - flwr FedAvg| = {diff_flwr:.1e}"
    )
    result.update(asynchronous(initial, seed, engine))
    print(
        f"asynchronous run: staleness of arriving updates {result['async_staleness']}, largest revival weight "
        f"{result['async_revival_weight']:.2f}, {result['async_kd_steps']} distillation steps on the server"
    )
    print("pooled loss after each server step: " + ", ".join(f"{v:.3f}" for v in result["async_loss"]))
    return result


def asynchronous(initial: dict, seed: int, engine: str) -> dict:
    """FedRevive as designed: clients of different speeds, a server step every 2 arrivals, stale updates.

    ``run_async`` pushes one Flower TRAIN message per job through the Grid's message API and pulls each
    reply when a simulated clock (log-normal job durations, one client 5x slower) says it arrives; the
    same ClientApp answers. Stale updates get a revival weight > 0 and the server distils them.
    """
    x = torch.cat([client_data(c, seed)[0] for c in range(NUM_CLIENTS)])
    y = torch.cat([client_data(c, seed)[1] for c in range(NUM_CLIENTS)])

    @torch.no_grad()
    def pooled_loss(model: nn.Module) -> dict[str, float]:
        return {"loss": float(nn.functional.cross_entropy(model(x), y))}

    rule = FedRevive(
        num_classes=2, input_shape=(FEATURES,), buffer_size=2, kd_steps=10, batch_size=64, seed=seed
    )
    strategy = AsyncFedAvg(rule, make_model, initial_state=initial)
    speed = ClientSpeedModel(NUM_CLIENTS, sigma=0.5, slow_fraction=0.34, seed=seed)
    if engine == "simulation":
        ship_this_module_to_ray()
    with quiet_flower():
        history = run_async(
            strategy, make_client_app(seed), speed, pooled_loss, max_server_steps=4, seed=seed, engine=engine
        )
    staleness = history.staleness
    beta = revival_weight(torch.tensor(staleness, dtype=torch.float64), rule.beta_max, rule.beta_exp)
    return {
        "async_staleness": staleness,
        "async_revival_weight": float(beta.max()),
        "async_kd_steps": int(rule.kd_steps_done),
        "async_loss": [m["loss"] for _, _, m in history.evals],
    }


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(engine=sys.argv[1] if len(sys.argv) > 1 else "inprocess")
