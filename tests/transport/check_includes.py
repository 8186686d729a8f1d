#!/usr/bin/python3
"""The transport's layering, read from the compiler and the linker.

transport/ is a core (the top folder and coll/) and paths, one folder each
under transport/paths/ (shm, ipc, stage), reached by the core only through
the table of px_path.h. This checks, for the library's sources as the build
compiles them (compile_commands.json):

  1. no core file (source or header) includes, directly or not, a header of
     a path: each file's dependencies are the compiler's own (`cc -MM` with
     the build's flags; a header is run as a translation unit of its own);
  2. no path includes another path's header;
  3. no include circle between the headers of transport/ (a header that
     reaches itself through the others, as include guards would hide);
  4. no core object names a symbol a path object defines (`nm`), except
     px_path.c's references to the table entries (px__path_*): the core
     calls a path only through the table.

Usage: check_includes.py SOURCE_ROOT BUILD_ROOT
       check_includes.py --self-test   (each rule fed a tree that breaks it)
Exit status 0 when every rule holds, 1 with one line per violation.
"""
import json
import os
import shlex
import subprocess
import sys
import tempfile

TABLE_PREFIX = "px__path_"  # the table entries px_path.c names


def component(rel):
    """'core' or 'paths/NAME' for a path relative to transport/."""
    parts = rel.split("/")
    if len(parts) >= 3 and parts[0] == "paths":
        return "paths/" + parts[1]
    return "core"


def dep_flags(argv):
    """The compile command's arguments without output, dependency and
    source arguments: what `-MM` needs to see the same includes."""
    out, skip = [], False
    for arg in argv[1:]:
        if skip:
            skip = False
            continue
        if arg in ("-o", "-MQ", "-MF", "-MT"):
            skip = True
            continue
        if arg in ("-c", "-MD", "-MMD") or arg.startswith("-fdiagnostics-color"):
            continue
        out.append(arg)
    return [a for a in out if not a.endswith((".c", ".cu", ".cpp"))]


def compiler(argv):
    """The compiler of a command line, past a ccache in front of it."""
    return argv[1:] if os.path.basename(argv[0]) == "ccache" else argv


def mm(cc, flags, path, cwd, as_c=False):
    """The files `path` depends on, as `cc -MM` lists them (absolute)."""
    cmd = [cc] + flags + ["-MM", "-MT", "x"] + (["-x", "c"] if as_c else []) + [path]
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), r.stderr.strip()))
    text = r.stdout.replace("\\\n", " ")
    deps = text.split(":", 1)[1].split()
    return {os.path.normpath(os.path.join(cwd, d)) for d in deps}


def read_units(source_root, build_root):
    """[(file, component, flags, cc, cwd)] for transport's library sources."""
    top = os.path.join(os.path.realpath(source_root), "transport")
    with open(os.path.join(build_root, "compile_commands.json")) as f:
        entries = json.load(f)
    units = []
    for e in entries:
        path = os.path.normpath(os.path.join(e["directory"], e["file"]))
        rel = os.path.relpath(path, top)
        if rel.startswith("..") or rel.startswith("tools/"):
            continue
        argv = compiler(shlex.split(e["command"]) if "command" in e else e["arguments"])
        units.append((path, component(rel), dep_flags(argv), argv[0], e["directory"]))
    return top, units


def check_includes(top, units):
    """Rules 1-3 over the sources of `units` and the headers of transport/."""
    errors = []
    closure = {}
    flags_of = {}  # a component's flags, to run its headers with
    for path, comp, flags, cc, cwd in units:
        closure[path] = {d for d in mm(cc, flags, path, cwd) if d.startswith(top + "/")}
        flags_of.setdefault(comp, (flags, cc, cwd))
    headers = set()
    for deps in closure.values():
        headers |= {d for d in deps if d.endswith(".h")}
    for h in sorted(headers):
        comp = component(os.path.relpath(h, top))
        flags, cc, cwd = flags_of.get(comp) or flags_of["core"]
        closure[h] = {d for d in mm(cc, flags, h, cwd, as_c=True) if d.startswith(top + "/")}
    for f in sorted(closure):
        comp = component(os.path.relpath(f, top))
        for d in sorted(closure[f]):
            if d == f or not d.endswith(".h"):
                continue
            dcomp = component(os.path.relpath(d, top))
            rf, rd = os.path.relpath(f, top), os.path.relpath(d, top)
            if comp == "core" and dcomp != "core":
                errors.append("core file transport/%s includes %s's private header "
                              "transport/%s" % (rf, dcomp, rd))
            elif comp != "core" and dcomp not in ("core", comp):
                errors.append("transport/%s (%s) includes another path's header "
                              "transport/%s" % (rf, comp, rd))
    for h in sorted(headers):
        for g in sorted(closure[h]):
            if g != h and g in headers and h in closure.get(g, ()) and h < g:
                errors.append("include circle: transport/%s and transport/%s include each "
                              "other" % (os.path.relpath(h, top), os.path.relpath(g, top)))
    return errors


def nm_symbols(obj):
    """(defined, undefined) global symbols of an object file."""
    r = subprocess.run(["nm", "-g", obj], capture_output=True, text=True, check=True)
    defined, undefined = set(), set()
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) == 2 and f[0] == "U":
            undefined.add(f[1])
        elif len(f) == 3 and f[1] not in ("U", "w", "v"):
            defined.add(f[2])
    return defined, undefined


def check_symbols(top, units, build_root):
    """Rule 4: the objects the build made for `units` (compile_commands'
    output), core ones naming no path's symbol but the table entries."""
    errors = []
    with open(os.path.join(build_root, "compile_commands.json")) as f:
        outputs = {os.path.normpath(os.path.join(e["directory"], e["file"])):
                   os.path.join(e["directory"], e["output"])
                   for e in json.load(f) if "output" in e}
    defs, undefs = {}, {}
    for path, comp, _, _, _ in units:
        obj = outputs.get(path)
        if not obj or not os.path.exists(obj):
            errors.append("no object for transport/%s (build the library first)" %
                          os.path.relpath(path, top))
            continue
        defs[path], undefs[path] = nm_symbols(obj)
    owner = {}
    for path, syms in defs.items():
        for s in syms:
            owner[s] = path
    for path, syms in sorted(undefs.items()):
        rel = os.path.relpath(path, top)
        comp = component(rel)
        for s in sorted(syms):
            o = owner.get(s)
            if not o:
                continue
            ocomp = component(os.path.relpath(o, top))
            if ocomp == "core" or ocomp == comp:
                continue
            if comp == "core" and s.startswith(TABLE_PREFIX) and rel == "px_path.c":
                continue  # the table itself
            errors.append("transport/%s (%s) calls %s of %s by name (only the table may)"
                          % (rel, comp, s, os.path.relpath(o, top)))
    return errors


def run(source_root, build_root, symbols=True):
    top, units = read_units(source_root, build_root)
    if not units:
        return ["no transport/ sources in %s/compile_commands.json" % build_root]
    if not any(c != "core" for _, c, _, _, _ in units):
        return ["no transport/paths/ sources in %s/compile_commands.json" % build_root]
    errors = check_includes(top, units)
    if symbols:
        errors += check_symbols(top, units, build_root)
    return errors


# --- self-test: every rule fed a small tree that breaks it -------------------

def make_tree(root, files):
    """Writes `files` ({relative path: text}) under root/transport and a
    compile_commands.json in root/build compiling every .c into build/."""
    src = os.path.join(root, "src")
    build = os.path.join(root, "build")
    os.makedirs(build)
    entries = []
    for rel, text in files.items():
        p = os.path.join(src, "transport", rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
    incs = ["-I" + os.path.join(src, "transport")]
    for rel in files:
        if rel.startswith("paths/"):
            d = "-I" + os.path.join(src, "transport", os.path.dirname(rel))
            if d not in incs:
                incs.append(d)
    for rel in files:
        if not rel.endswith(".c"):
            continue
        out = rel.replace("/", "_") + ".o"
        cmd = ["cc"] + incs + ["-MD", "-MQ", out, "-MF", out + ".d", "-o", out, "-c",
                               os.path.join(src, "transport", rel)]
        subprocess.run(cmd, cwd=build, check=True)
        entries.append({"directory": build, "command": shlex.join(cmd),
                        "file": os.path.join(src, "transport", rel), "output": out})
    with open(os.path.join(build, "compile_commands.json"), "w") as f:
        json.dump(entries, f)
    return src, build


GOOD = {
    "core.h": "#ifndef CORE_H\n#define CORE_H\nint core_fn(void);\n#endif\n",
    "path.h": "#ifndef PATH_H\n#define PATH_H\nstruct path { int (*go)(void); };\n"
              "extern const struct path px__path_p;\n#endif\n",
    "core.c": '#include "core.h"\nint core_fn(void) { return 0; }\n',
    "px_path.c": '#include "path.h"\nint choose(void) { return px__path_p.go(); }\n',
    "paths/p/p.h": "#ifndef P_H\n#define P_H\nint p_fn(void);\n#endif\n",
    "paths/p/p.c": '#include "core.h"\n#include "path.h"\n#include "p.h"\n'
                   "int p_fn(void) { return core_fn(); }\n"
                   "const struct path px__path_p = {p_fn};\n",
    "paths/q/q.c": '#include "core.h"\nint q_fn(void) { return core_fn(); }\n',
}


def self_test():
    cases = [
        ("a layering that holds", {}, None),
        ("a core file including a path's header",
         {"core.c": '#include "core.h"\n#include "paths/p/p.h"\n'
                    "int core_fn(void) { return 0; }\n"},
         "core file transport/core.c includes paths/p's private header"),
        ("a path including another path's header",
         {"paths/q/q.c": '#include "core.h"\n#include "../p/p.h"\n'
                         "int q_fn(void) { return core_fn(); }\n"},
         "includes another path's header transport/paths/p/p.h"),
        ("two headers including each other",
         {"core.h": '#ifndef CORE_H\n#define CORE_H\n#include "c2.h"\nint core_fn(void);\n#endif\n',
          "c2.h": '#ifndef C2_H\n#define C2_H\n#include "core.h"\n#endif\n'},
         "include circle: transport/c2.h and transport/core.h"),
        ("a core file calling a path by name",
         {"core.c": '#include "core.h"\nint p_fn(void);\n'
                    "int core_fn(void) { return 0; }\nint g(void) { return p_fn(); }\n"},
         "transport/core.c (core) calls p_fn of paths/p/p.c by name"),
    ]
    failed = 0
    for name, change, expect in cases:
        files = dict(GOOD)
        files.update(change)
        with tempfile.TemporaryDirectory() as tmp:
            src, build = make_tree(tmp, files)
            errors = run(src, build)
        ok = not errors if expect is None else any(expect in e for e in errors)
        print("%s: %s%s" % ("ok" if ok else "FAIL", name,
                            "" if ok else " -> %r (expected %r)" % (errors, expect)))
        failed += not ok
    return 1 if failed else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) != 3:
        print(__doc__.strip().split("\n\n")[-2], file=sys.stderr)
        return 2
    errors = run(sys.argv[1], sys.argv[2])
    for e in errors:
        print(e)
    if not errors:
        print("transport layering: core and paths apart, no include circle, "
              "paths reached through the table only")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
