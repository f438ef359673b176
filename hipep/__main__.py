"""Command line: `python -m hipep <command> ...` (also the `hipep` console script).

Commands register themselves in COMMANDS through `_command`; each gets its own argparse
subparser and returns the process exit code. Exit codes: 0 success, 1 the command's negative
answer (for `explain`: some node is not claimed), 2 an error (message on stderr, no traceback).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

# name -> (help, add_arguments(parser), run(args) -> exit code)
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None],
                          Callable[[argparse.Namespace], int]]] = {}

EXIT_OK, EXIT_NOT_ALL, EXIT_ERROR = 0, 1, 2


def _command(name: str, help: str, add_arguments: Callable[[argparse.ArgumentParser], None]):
    def register(run: Callable[[argparse.Namespace], int]):
        COMMANDS[name] = (help, add_arguments, run)
        return run
    return register


def _explain_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="path to an .onnx model (external data is not read)")
    p.add_argument("--all", action="store_true", help="name every claimed node (default: the first few "
                   "of each subgraph and a count)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="the device the session would run on: on cuda, nodes without a GPU kernel are left "
                        "to other EPs (default: cpu); no GPU is needed to ask")


@_command("explain", "show which nodes hipep claims and why it leaves the others "
          "(exit 0: all claimed, 1: some not claimed, 2: error)", _explain_arguments)
def _explain(args: argparse.Namespace) -> int:
    from .explain import explain

    report = explain(args.model, device=args.device)
    print(report.format(all_nodes=args.all))
    return EXIT_OK if report.all_claimed else EXIT_NOT_ALL


@_command("demo", "run a small attention block on hipep's default device (the GPU where there is one, "
          "else the CPU reference device) and compare it with ONNX Runtime's CPU EP (exit 0: outputs match)",
          lambda p: p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                                   help="the device to run on (default: auto)"))
def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return EXIT_OK if run_demo(device=args.device) else EXIT_NOT_ALL


@_command("accuracy", "compare hipep with ONNX Runtime's CPU EP on the accuracy models; prints a Markdown "
          "table (exit 1 when anything is above its threshold)",
          lambda p: None)
def _accuracy(args: argparse.Namespace) -> int:
    from .tools.accuracy import main

    return main(args.rest)  # the harness parses its own options (--models, --list, --no-tokens)


def _precompile_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", help="compile for this GPU architecture (e.g. sm_90) without a GPU; default: the GPU of "
                                  "device_id 0")
    p.add_argument("--warp-size", type=int, default=32, help="HIPEP_WARP_SIZE with --arch (default 32)")


@_command("precompile", "compile every GPU kernel into the kernel cache (HIPEP_KERNEL_CACHE, default "
          "~/.cache/hipep/kernels) for this machine's GPU, or for --arch without one", _precompile_arguments)
def _precompile(args: argparse.Namespace) -> int:
    import time

    from .runtime import kernel_cache
    from .runtime.gpu_kernels import precompile_sources

    if args.arch:
        arch, defines = args.arch, {"HIPEP_WARP_SIZE": args.warp_size}
    else:
        from .runtime.cuda import get_device

        device = get_device(0)
        arch, defines = device.arch, dict(device.defines)
    start = time.perf_counter()
    sources = precompile_sources()
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:  # NVRTC releases the GIL
        cached = sum(hit for _, hit in pool.map(lambda s: kernel_cache.compile_cubin(s[1], s[0], arch, defines),
                                                sources))
    print(f"hipep precompile: compiled {len(sources) - cached} kernel(s) for {arch} ({cached} already cached, "
          f"{len(sources)} in all) in {time.perf_counter() - start:.1f} s into {kernel_cache.cache_dir()}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hipep", description="hipep: ONNX Runtime execution provider tools")
    sub = parser.add_subparsers(dest="command", metavar="command")
    sub.required = True
    for name, (help, add_arguments, run) in COMMANDS.items():
        p = sub.add_parser(name, help=help, description=help)
        add_arguments(p)
        p.set_defaults(_run=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)  # usage errors exit 2 through argparse
    if rest and args.command != "accuracy":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.rest = rest
    from .errors import HipepError

    try:
        return args._run(args)
    except HipepError as e:
        print(f"hipep {args.command}: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - a bug in hipep; HIPEP_DEBUG=1 shows the traceback
        if os.environ.get("HIPEP_DEBUG"):
            raise
        print(f"hipep {args.command}: internal error: {type(e).__name__}: {e} "
              f"(set HIPEP_DEBUG=1 for a traceback)", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
