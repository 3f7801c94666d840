"""``fabricwatch topology``: write a standard supernode, or check a cluster file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fabricwatch import topology


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "topology",
        help="write a standard supernode's cluster YAML, or validate one",
        description="Write a standard rail-optimised leaf-spine supernode (DESIGN §2) as cluster YAML, "
        "or validate an existing cluster file with --check.",
    )
    p.add_argument("--gpus", type=int, default=1024, help="number of GPUs (default 1024)")
    p.add_argument("--rails", type=int, choices=(4, 8), default=8, help="rails (default 8)")
    p.add_argument("--gpus-per-node", type=int, choices=(8, 16), default=8, help="GPUs per node (default 8)")
    p.add_argument("--name", help="cluster name (default supernode-<gpus>g-<rails>r)")
    p.add_argument("--out", type=Path, help="write here instead of stdout")
    p.add_argument("--check", type=Path, metavar="FILE", help="validate a cluster YAML and print its summary")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.check:
        print(topology.load(args.check).summary())
        return 0
    topo = topology.generate(args.gpus, args.rails, args.gpus_per_node, name=args.name)
    text = topo.to_yaml()
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}: {topo.summary()}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
