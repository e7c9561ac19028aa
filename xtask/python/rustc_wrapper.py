"""rustc wrapper for evcxr's builds in `cargo xtask test` (RUSTC_WRAPPER).

Usage (by cargo, through target/notebook-deps/rustc-wrapper, which runs this
file with the virtualenv's Python): rustc_wrapper.py LINK_ARGS RUSTC ARGS...

The test command executes the notebooks with their own preamble (`:dep
agentrl`, `:dep tch`, `:dep rand`), so evcxr's cargo resolves those crates and
evcxr's rust-analyzer reads their sources to learn the type of each variable a
cell keeps. Compiling them again in evcxr's build folder would only repeat, in
another profile and under `--target`, what the chapter stage has just built
(see `BuiltLibrary` in xtask/src/notebook.rs). So, through this wrapper:

- a cell (`--crate-name ctx --crate-type cdylib`, evcxr's crate) is compiled by rustc with its
  `--extern` paths and dependency search paths replaced by the rlibs of the
  chapters' build, listed one argument a line in the file LINK_ARGS
  (target/notebook-deps/link-args; the rlibs beside it are a snapshot of what
  `cargo build` of the chapter runner made from the current source);
- any other crate of evcxr's build gets empty placeholder outputs (its build
  script, an empty program), which nothing links: a cell links only the rlibs
  of LINK_ARGS;
- queries (`rustc -vV`, `--print`, cargo's probe crate `___`) run unchanged.

A cell that needs a crate the chapters' build does not provide fails with a
message saying so.
"""

import os
import sys


def option(args, name):
    """Values of `name` in `args`, given as `name value` or `name=value`."""
    values = []
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            values.append(args[i + 1])
        elif arg.startswith(name + "="):
            values.append(arg[len(name) + 1 :])
    return values


def codegen(args, key):
    """The value of `-C key=value` (or `-Ckey=value`), or "" if absent."""
    for i, arg in enumerate(args):
        setting = args[i + 1] if arg == "-C" and i + 1 < len(args) else arg[2:] if arg.startswith("-C") else ""
        if setting.startswith(key + "="):
            return setting[len(key) + 1 :]
    return ""


def for_cell(args, link_args):
    """evcxr's arguments for a cell, linked against the chapters' build."""
    with open(link_args, encoding="utf-8") as f:
        linked = f.read().splitlines()
    provided = {linked[i + 1].split("=", 1)[0] for i, arg in enumerate(linked) if arg == "--extern"}
    out, i = [], 0
    while i < len(args):
        arg = args[i]
        pair = args[i + 1] if i + 1 < len(args) else ""
        if arg == "-L" and pair.startswith("dependency="):
            i += 2
            continue
        if arg.startswith("-Ldependency="):
            i += 1
            continue
        if arg == "--extern" and "=" in pair:
            crate = pair.split("=", 1)[0].split(":")[-1]
            if crate not in provided:
                sys.exit(
                    f"rustc-wrapper: a cell needs the crate `{crate}`, which the chapters' build does not provide "
                    f"(it provides {', '.join(sorted(provided))}; see xtask/src/notebook.rs)"
                )
            i += 2
            continue
        out.append(arg)
        i += 1
    return out + linked


def placeholder(args, crate):
    """Write the files rustc would write for `args`, empty."""
    out_dir = (option(args, "--out-dir") or ["."])[-1]
    extra = codegen(args, "extra-filename")
    emit = ",".join(option(args, "--emit")).split(",") if option(args, "--emit") else ["link"]
    emit = [kind.split("=", 1)[0] for kind in emit if kind]
    types = option(args, "--crate-type") or ["bin"]
    files = []
    if "dep-info" in emit:
        files.append((f"{crate}{extra}.d", False))
    if "metadata" in emit:
        files.append((f"lib{crate}{extra}.rmeta", False))
    if "link" in emit:
        for kind in types:
            if kind == "bin":
                files.append((f"{crate}{extra}", True))
            elif kind in ("lib", "rlib"):
                files.append((f"lib{crate}{extra}.rlib", False))
            elif kind in ("proc-macro", "dylib", "cdylib"):
                files.append((f"lib{crate}{extra}.so", False))
            elif kind == "staticlib":
                files.append((f"lib{crate}{extra}.a", False))
    os.makedirs(out_dir, exist_ok=True)
    for name, program in files:
        path = os.path.join(out_dir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write("#!/bin/sh\n" if program else "")
        if program:
            os.chmod(path, 0o755)


def main():
    link_args, rustc, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    names = option(args, "--crate-name")
    if not names or names[-1] == "___":
        os.execvp(rustc, [rustc] + args)
    if names[-1] == "ctx" and "cdylib" in option(args, "--crate-type"):
        os.execvp(rustc, [rustc] + for_cell(args, link_args))
    placeholder(args, names[-1])


if __name__ == "__main__":
    main()
