"""The ``neurips26`` command line: ``list | show | check | report | env | readme | exports``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _parse_seeds(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(
            f"error: --seeds must be comma-separated non-negative integers, got {text!r}"
        ) from None
    if not seeds or any(s < 0 for s in seeds):
        raise SystemExit(f"error: --seeds must be comma-separated non-negative integers, got {text!r}")
    return seeds


def _resolve(slug: str) -> str:
    from neurips26.registry import extra_claim, get

    if extra_claim(slug) is not None:
        return slug
    try:
        return get(slug).slug
    except KeyError as err:
        raise SystemExit(f"error: {err.args[0]}") from None


def cmd_list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from neurips26.registry import AREAS, METHODS, status

    if args.area and args.area not in AREAS:
        raise SystemExit(f"error: --area must be one of {', '.join(AREAS)}, got {args.area!r}")
    table = Table(title="neurips26 methods")
    for col in ("slug", "method", "area", "status", "baselines"):
        table.add_column(col)
    counts: dict[str, int] = {}
    for m in METHODS:
        if args.area and m.area != args.area:
            continue
        state = status(m.slug)[0]
        counts[state] = counts.get(state, 0) + 1
        table.add_row(m.slug, m.name, m.area, state, ", ".join(m.baselines))
    console = Console(width=160)
    console.print(table)
    console.print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from neurips26.registry import get, load_claim, status

    info = get(_resolve(args.slug))
    state, detail = status(info.slug)
    print(f"{info.name} ({info.slug}): {info.title}")
    print(f"  paper: seed {info.seed}, paragraph {info.paragraph} ('{info.seed_start} ...')")
    print(f"  module: {info.module}   components: {', '.join(info.components)}")
    print(f"  baselines: {', '.join(info.baselines)}   metric: {info.metric}")
    print(f"  extras: {', '.join(info.extras) or '-'}   spec: {info.spec}")
    print(f"  status: {state} ({detail})")
    if state == "implemented":
        from neurips26.claims.base import primary_headlines

        claim = load_claim(info.slug)
        print(f"  claim: {claim.claim}")
        for crit in claim.criteria:
            why = f" (decides: {crit.cost_decides})" if crit.cost_decides else ""
            print(f"  criterion [{crit.kind}]: {crit.describe(claim.method)}{why}")
        deciding = {c.label for c in claim.criteria if c.deciding}
        primary = primary_headlines(claim.headlines, deciding)
        for i, head in enumerate(claim.headlines):
            mark = "primary " if i in primary else ""
            print(f"  {mark}headline: {head.text}")
        for label, text in claim.diagnoses.items():
            print(f"  diagnosis of {label}: {text}")
        for profile, seeds in claim.seeds.items():
            print(f"  profile {profile}: seeds {list(seeds)}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from neurips26.claims.base import Profile
    from neurips26.claims.runner import run_many
    from neurips26.registry import implemented_slugs, method_info, status

    try:
        Profile.parse(args.profile)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    seeds = _parse_seeds(args.seeds)
    if args.all:
        slugs = implemented_slugs()
        if not slugs:
            print("no implemented claim checks yet")
            return 0
    elif args.slugs:
        slugs = [_resolve(s) for s in args.slugs]
        for slug in slugs:
            state, detail = status(method_info(slug).slug)
            if state != "implemented":
                raise SystemExit(f"error: {slug} has no runnable claim check ({state}: {detail})")
    else:
        raise SystemExit("error: name one or more slugs, or pass --all")
    results = run_many(
        slugs, args.profile, seeds=seeds, out=args.out, force=args.force, executor=args.executor
    )
    for r in results:
        flag = "  OVER BUDGET" if r["over_budget"] else ""
        print(f"{r['slug']:<18} {r['profile']:<6} {r['verdict']:<15} {r['wall_s']:7.1f} s{flag}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from neurips26.claims.base import Profile
    from neurips26.claims.report import build_report
    from neurips26.claims.runner import default_out

    try:
        profile = Profile.parse(args.profile)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    folder = (Path(args.out) if args.out else default_out()) / profile.value
    md, html_path = build_report(folder)
    print(f"wrote {md} and {html_path}")
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    from neurips26.claims.runner import capture_env

    print(json.dumps(capture_env(), indent=1))
    return 0


def cmd_readme(args: argparse.Namespace) -> int:
    from neurips26.readme import render

    path = Path(args.path)
    if not path.is_file():
        raise SystemExit(f"error: README not found at {path}")
    text = path.read_text()
    new = render(text, Path(args.results))
    if args.check:
        if new != text:
            print("README method table is out of date; run `neurips26 readme`")
            return 1
        print("README method table is up to date")
        return 0
    path.write_text(new)
    print(f"updated {path}")
    return 0


def cmd_exports(args: argparse.Namespace) -> int:
    import neurips26
    from neurips26.registry import write_exports

    package = Path(neurips26.__file__).resolve().parent
    if args.root is None:
        root = package.parents[1]
        if (root / "src" / "neurips26").resolve() != package:
            raise SystemExit(f"error: {package} is not in a source checkout (src/neurips26); pass --root")
    else:
        root = Path(args.root)
    stale = write_exports(root, check=args.check)
    if args.check:
        if stale:
            print(
                f"out of date: {', '.join(stale)}; run `neurips26 exports` "
                "(the area stubs and API.md are generated from the modules' __all__)"
            )
            return 1
        print("area stubs (src/neurips26/<area>/__init__.pyi) and API.md are up to date")
        return 0
    print(f"wrote {', '.join(stale)}" if stale else "area stubs and API.md already up to date")
    return 0


def _named_cache(name: str | None, config):
    """A cache factory by name for ``neurips26 ruler``: dynamic, kivi<bits> or adakvq (static 2.5 bits)."""
    if name in (None, "dynamic", "full"):
        return None
    if name.startswith("kivi"):
        from neurips26.inference import KIVICache

        try:
            bits = int(name[4:] or 2)
        except ValueError:
            raise SystemExit(f"error: --cache must be dynamic, kivi<bits> or adakvq, got {name!r}") from None
        return lambda: KIVICache(config, bits, 32, 32, keep_dequantized=True)
    if name == "adakvq":
        import torch

        from neurips26.inference.adakvq import AADProfile, AdaKVQCache, AdaKVQConfig

        layers = config.num_hidden_layers
        profile = AADProfile(torch.linspace(0, 1, layers), torch.zeros(layers), [])
        quant = AdaKVQConfig(bits=(2, 3, 4), avg_bits=2.5, group_size=32, residual_length=32, online=False)
        return lambda: AdaKVQCache(config, quant, profile, None, keep_dequantized=True)
    raise SystemExit(f"error: --cache must be dynamic, kivi<bits> or adakvq, got {name!r}")


def cmd_ruler(args: argparse.Namespace) -> int:
    """RULER-style evaluation of a pretrained model with a named cache: print the table, write JSON."""
    import torch

    from neurips26.common.models import load_pretrained
    from neurips26.common.ruler import evaluate

    try:
        lengths = tuple(int(x) for x in args.lengths.split(",") if x.strip())
    except ValueError:
        raise SystemExit(f"error: --lengths must be comma-separated integers, got {args.lengths!r}") from None
    from neurips26.common.ruler import TASKS

    tasks = tuple(TASKS) if args.tasks == "all" else tuple(t for t in args.tasks.split(",") if t.strip())
    torch.set_num_threads(args.threads)
    net, tok = load_pretrained(args.model)
    try:
        table = evaluate(
            net,
            tok,
            _named_cache(args.cache, net.config),
            None,
            tasks,
            lengths,
            args.n,
            args.seed,
            batch_size=args.batch_size,
        )
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    print(f"{'task':18s} {'length':>6s} {'n':>4s} {'acc':>6s} {'gen':>5s} {'s/item':>7s}")
    for row in table:
        print(
            f"{row['task']:18s} {row['length']:6d} {row['n']:4d} {row['accuracy']:6.3f} "
            f"{row['gen_tokens']:5.1f} {row['s_per_item']:7.3f}"
        )
    if args.out is not None:
        path = Path(args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        from neurips26.claims.runner import capture_env

        meta = {
            "kind": "ruler",
            "model": args.model,
            "cache": args.cache or "dynamic",
            "seed": args.seed,
            "n": args.n,
            "tasks": list(tasks),
            "lengths": list(lengths),
            "command": "neurips26 ruler " + " ".join(args.argv),
            "env": capture_env(),
        }
        path.write_text(json.dumps({**meta, "table": table}, indent=2))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from neurips26.bench import run_bench
    from neurips26.bench.suites import BENCHMARKS

    names = args.names or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"error: unknown benchmark(s) {unknown}; choose from {sorted(BENCHMARKS)}")
    try:
        threads = [int(t) for t in args.threads.split(",") if t.strip()]
    except ValueError:
        raise SystemExit(f"error: --threads must be comma-separated ints, got {args.threads!r}") from None
    where = None
    for item in args.where or ():
        key, sep, values = item.partition("=")
        if not sep or not key or not values:
            raise SystemExit(
                f"error: --where must look like KEY=V1,V2 (e.g. context=1024,4096), got {item!r}"
            )
        parsed = [
            int(v) if v.strip().lstrip("-").isdigit() else v.strip() for v in values.split(",") if v.strip()
        ]
        where = {**(where or {}), key: parsed}
    for name in names:
        try:
            res = run_bench(name, quick=args.quick, threads=threads, seed=args.seed, out=args.out, where=where,
                            log=lambda line: print(line, flush=True))  # fmt: skip
        except ValueError as err:
            raise SystemExit(f"error: {err}") from None
        for arm, t in res["targets"].items():
            if t["met"] is None:
                state = "not measured in this run"
            else:
                state = f"{t['measured']:.2f}x -> {'met' if t['met'] else 'missed'}"
            print(f"  target {arm} <= {t['max_ratio']}x at {res['x']}={t[res['x']]}: {state}")
        print(f"{name}: {res['wall_s']:.1f} s -> {res['path']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neurips26",
        description="NeurIPS 2026 methods as tested components, each proven by a claim check.",
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="{list,show,check,report,env,readme,exports,ruler,bench}"
    )
    p = sub.add_parser("list", help="all 36 methods and their derived status")
    p.add_argument("--area", help="only methods of this area (e.g. rl, graph)")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("show", help="one method in detail")
    p.add_argument("slug")
    p.set_defaults(func=cmd_show)
    p = sub.add_parser("check", help="run claim checks and write results/<profile>/<slug>.json")
    p.add_argument("slugs", nargs="*", help="method slugs (see `neurips26 list`)")
    p.add_argument("--all", action="store_true", help="every implemented claim check")
    p.add_argument("--profile", default="quick", help="smoke | quick (default, <= 60 s) | full (<= 10 min)")
    p.add_argument("--seeds", help="comma-separated seeds overriding the claim's (e.g. 0,1,2)")
    p.add_argument("--out", type=Path, default=None, help="results folder (default: results/)")
    p.add_argument("--force", action="store_true", help="rerun even if a result or partial seeds exist")
    p.add_argument(
        "--executor",
        default="local",
        choices=["local", "ray"],
        help="local (default) or ray: one Ray task per (claim, seed); honours RAY_ADDRESS",
    )
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("report", help="write report.md and report.html from result JSON files")
    p.add_argument("--profile", default="quick", help="which results/<profile>/ to report (default quick)")
    p.add_argument("--out", default=None, help="results folder (default: results/)")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("env", help="print the environment captured into every result")
    p.set_defaults(func=cmd_env)
    p = sub.add_parser("readme", help="regenerate the README method table from the registry and results/full")
    p.add_argument("--path", default="README.md")
    p.add_argument("--results", default="results/full")
    p.add_argument("--check", action="store_true", help="exit 1 if the table is out of date")
    p.set_defaults(func=cmd_readme)
    p = sub.add_parser(
        "exports", help="regenerate every area's __init__.pyi stub and API.md from the modules' __all__"
    )
    p.add_argument(
        "--root",
        default=None,
        help="repository root to write under (default: this checkout of src/neurips26)",
    )
    p.add_argument("--check", action="store_true", help="exit 1 naming the generated files that are stale")
    p.set_defaults(func=cmd_exports)
    p = sub.add_parser(
        "ruler", help="RULER-style long-context evaluation of a pretrained model with a KV cache"
    )
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--cache", default=None, help="dynamic (default) | kivi<bits> | adakvq")
    p.add_argument("--lengths", default="1024", help="comma-separated context lengths in tokens")
    p.add_argument("--tasks", default="niah_single_1", help="comma-separated RULER task names, or all")
    p.add_argument("--n", type=int, default=50, help="items per (task, length)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None, help="write the table as JSON here")
    p.set_defaults(func=cmd_ruler)
    p = sub.add_parser("bench", help="time efficiency components against their references (results/bench/)")
    p.add_argument(
        "names", nargs="*", help="benchmarks (default: all): kv_decode adera_codec adacal_prefill ..."
    )
    p.add_argument("--quick", action="store_true", help="the quick case list (under 3 minutes for all)")
    p.add_argument("--threads", default="1,2", help="comma-separated intra-op thread counts (default 1,2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="results folder (default: results/)")
    p.add_argument(
        "--where", action="append", metavar="KEY=V1,V2",
        help="run only the cases with these values (repeatable), e.g. --where context=1024,4096",
    )  # fmt: skip
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv[1:]  # the subcommand's own arguments, recorded by commands that write results
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
