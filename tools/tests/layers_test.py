#!/usr/bin/env python3
"""The layers of the whole tree (ctest layers): no #include, CMake link or file a CMake rule runs
or reads lies back up.

LAYERS below is the include order, lowest first; it is the README's layer map ("Layers") and
zsm/src/README.md's, written once as data. A folder may include (and its CMake targets may
link) its own files and those of the folders it names, and of theirs, transitively; nothing
else of the tree. Two checks:
  includes  every #include "..." and #include <zsm/...> in a C or C++ file of the tree,
            resolved to the file it names (the including file's folder first, then the
            folders the build puts on the include path); one that names no file of the tree
            (a system or generated header) is not an edge
  links     every target_link_libraries() in a CMakeLists.txt or *.cmake: the targets named
            (an alias like zsm::cache resolved) against the folder that defines each; a name
            the tree does not define (benchmark::benchmark, PkgConfig::LZ4) is not an edge
  paths     every file or folder of the tree a CMakeLists.txt or *.cmake names through
            ${PROJECT_SOURCE_DIR}/ or ${CMAKE_SOURCE_DIR}/ (a script a rule runs, a data file
            a test reads, an include directory), against the folder of the CMake file
Each edge back up prints one line (file, what it names, both folders); exit status 1 if any.
Before it reads the tree, the checker is run on a made-up one with one edge of each kind
back up, which it must report (a checker that finds nothing proves nothing).
"""
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (folder, the folders below it that it uses directly), lowest first.
LAYERS = [
    ("zsm/include", []),
    ("zsm/src/base", ["zsm/include"]),
    ("zsm/src/classes", ["zsm/src/base"]),
    ("zsm/src/memory", ["zsm/src/base"]),
    ("zsm/src/zspage", ["zsm/src/classes", "zsm/src/memory"]),
    ("zsm/src/tcache", ["zsm/src/zspage"]),
    ("zsm/src/pool", ["zsm/src/tcache"]),
    ("zsm/src/api", ["zsm/src/pool"]),
    # zsm/CMakeLists.txt's targets, the allocator: what links them sees its public headers.
    ("zsm", ["zsm/include"]),
    ("zsm/stats", ["zsm"]),
    ("compress/include", ["zsm/include"]),
    ("compress/codec", ["compress/include"]),
    ("compress/cache", ["compress/codec"]),
    ("compress/region", ["compress/cache"]),
    ("compress/rocksdb", ["compress/cache"]),
    ("compress", ["zsm", "compress/region", "compress/rocksdb"]),  # compress/CMakeLists.txt
    ("kernel", []),
    # bench/ also includes the allocator's private headers (its variants, the copy).
    ("bench", ["zsm/src/api", "zsm/stats", "compress", "kernel"]),
    ("examples", ["bench"]),
    ("tools", ["examples"]),
    ("tests", ["tools"]),
]
TOPS = ("zsm", "compress", "kernel", "bench", "examples", "tools", "tests")
# Where #include <zsm/...> finds the public headers.
PUBLIC = ("zsm/include", "zsm/stats/include", "compress/include")
# Quoted includes not beside the file: the include path the build gives each folder.
INCLUDE_PATH = {"zsm": ["zsm/src"], "bench": ["zsm/src", "kernel"], "tests": ["zsm/src", "compress/region", "compress/cache"],
                "compress": ["compress/cache", "compress/region"], "tools": ["bench"],
                "examples": ["bench"]}

SOURCE = (".h", ".hpp", ".c", ".cc", ".cpp")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
# add_library(), add_executable() and the tree's own zsm_add_*() functions, which make a target
# named by their first argument.
DEFINE = re.compile(r"\b(add_library|add_executable|zsm_add_\w+)\(\s*"
                    r"([A-Za-z0-9_:.-]+)(\s+ALIAS\s+([A-Za-z0-9_:.-]+))?")
LINK = re.compile(r"\btarget_link_libraries\(\s*([^)]*)\)", re.S)
SOURCE_PATH = re.compile(r"\$\{(?:PROJECT|CMAKE)_SOURCE_DIR\}/([A-Za-z0-9_./-]+)")


def allowed_below():
    """folder -> every folder it may use (itself included), the transitive closure."""
    direct = dict(LAYERS)
    closure = {}
    for folder, _ in LAYERS:  # lowest first: each one's direct uses are closed already
        seen = {folder}
        for d in direct[folder]:
            seen |= closure[d]
        closure[folder] = seen
    return closure


def layer_of(rel):
    """The layer a path of the tree (relative, '/'-separated) belongs to: the longest folder
    of LAYERS it is in; None outside them."""
    best = None
    for folder, _ in LAYERS:
        if (rel == folder or rel.startswith(folder + "/")) and (best is None or
                                                                len(folder) > len(best)):
            best = folder
    return best


def tree_files(root, wanted):
    """The files of the tree whose name `wanted` accepts, relative, '/'-separated."""
    for top in TOPS:
        for dirpath, dirnames, files in os.walk(os.path.join(root, top)):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for f in files:
                if wanted(f):
                    yield os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")


def resolve(root, rel, kind, name):
    """The tree file an include names, relative; None for a system or generated header."""
    if kind == "<":
        candidates = [f"{d}/{name}" for d in PUBLIC] if name.startswith("zsm/") else []
    else:
        here = os.path.dirname(rel)
        candidates = [os.path.normpath(os.path.join(here, name)).replace(os.sep, "/")]
        candidates += [f"{d}/{name}" for d in INCLUDE_PATH.get(rel.split("/")[0], [])]
    for c in candidates:
        if not c.startswith("..") and os.path.isfile(os.path.join(root, c)):
            return c
    return None


def include_edges_up(root, closure):
    """The includes that run back up, and how many includes of the tree were checked."""
    bad, checked = [], 0
    for rel in tree_files(root, lambda f: f.endswith(SOURCE)):
        source = layer_of(rel)
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for kind, name in INCLUDE.findall(text):
            target = resolve(root, rel, kind, name)
            if target is None:
                continue
            layer = layer_of(target)
            checked += 1
            if layer is not None and source is not None and layer not in closure[source]:
                close = ">" if kind == "<" else '"'
                bad.append(f"{rel}: #include {kind}{name}{close}: {source} includes {layer}, "
                           "a layer above it or beside it")
    return bad, checked


def cmake_text(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8") as f:
        return re.sub(r"#[^\n]*", "", f.read())  # comments out


def link_edges_up(root, closure):
    """The target_link_libraries() edges that run back up, and how many were checked."""
    files = list(tree_files(root, lambda f: f == "CMakeLists.txt" or f.endswith(".cmake")))
    defined, alias = {}, {}
    for rel in files:
        folder = layer_of(os.path.dirname(rel))
        for command, name, _, aliased in DEFINE.findall(cmake_text(root, rel)):
            if aliased:
                alias[name] = aliased
            elif command == "zsm_add_kernel_ref":  # the kernel's library, wherever it is made
                defined[name] = "kernel"
            else:
                defined.setdefault(name, folder)
    bad, checked = [], 0
    for rel in files:
        for m in LINK.finditer(cmake_text(root, rel)):
            words = m.group(1).split()
            if not words:
                continue
            target = alias.get(words[0], words[0])
            if target not in defined:
                continue
            for dep in words[1:]:
                dep = alias.get(dep, dep)
                if dep not in defined:
                    continue
                checked += 1
                if defined[dep] not in closure[defined[target]]:
                    bad.append(f"{rel}: {target} ({defined[target]}) links {dep} "
                               f"({defined[dep]}), a layer above it or beside it")
    return bad, checked


def path_edges_up(root, closure):
    """The tree paths CMake files name that lie back up, and how many were checked."""
    bad, checked = [], 0
    for rel in tree_files(root, lambda f: f == "CMakeLists.txt" or f.endswith(".cmake")):
        source = layer_of(os.path.dirname(rel))
        if source is None:  # the top CMakeLists.txt puts the layers together
            continue
        for name in SOURCE_PATH.findall(cmake_text(root, rel)):
            name = name.rstrip("/")
            if not os.path.exists(os.path.join(root, name)):
                continue
            layer = layer_of(name)
            checked += 1
            if layer is not None and layer not in closure[source]:
                bad.append(f"{rel}: names {name}: {source} uses {layer}, "
                           "a layer above it or beside it")
    return bad, checked


def check(root):
    """Every edge back up in the tree at `root`, and the includes, links and paths checked."""
    closure = allowed_below()
    bad_includes, includes = include_edges_up(root, closure)
    bad_links, links = link_edges_up(root, closure)
    bad_paths, paths = path_edges_up(root, closure)
    return bad_includes + bad_links + bad_paths, includes, links, paths


def self_test():
    """A made-up tree with includes, a link and a path back up: each must be reported."""
    with tempfile.TemporaryDirectory() as tmp:
        files = {
            "zsm/src/base/copy.h": '#include "pool/pool.h"\n',
            "zsm/src/pool/pool.h": '#include "base/copy.h"\n',
            "zsm/stats/stats.cpp": "#include <zsm/cache.hpp>\n",
            "compress/include/zsm/cache.hpp": "#include <zsm/zsmalloc.h>\n",
            "zsm/include/zsm/zsmalloc.h": "\n",
            "zsm/stats/CMakeLists.txt": "add_library(zsm_stats stats.cpp)\n"
                                        "target_link_libraries(zsm_stats PUBLIC zsm::cache)\n",
            "compress/CMakeLists.txt": "zsm_add_cache(zsm_cache STATIC)\n"
                                       "add_library(zsm::cache ALIAS zsm_cache)\n",
            "kernel/kernel.cmake": "add_custom_command(COMMAND "
                                   "${PROJECT_SOURCE_DIR}/tools/lib/build.py)\n",
            "tools/lib/build.py": "\n",
        }
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            with open(os.path.join(tmp, rel), "w", encoding="utf-8") as f:
                f.write(text)
        found = check(tmp)[0]
        want = ["zsm/src/base/copy.h: #include \"pool/pool.h\"",
                "zsm/stats/stats.cpp: #include <zsm/cache.hpp>",
                "zsm/stats/CMakeLists.txt: zsm_stats (zsm/stats) links zsm_cache (compress)",
                "kernel/kernel.cmake: names tools/lib/build.py"]
        missed = [w for w in want if not any(f.startswith(w) for f in found)]
        if missed or len(found) != len(want):
            print("layers: the checker is wrong on its made-up tree; it reported:", *found,
                  "and missed:", *missed, sep="\n  ")
            return False
    return True


def main():
    if not self_test():
        return 1
    bad, includes, links, paths = check(ROOT)
    for line in bad:
        print(line)
    if bad:
        print(f"layers: {len(bad)} edge(s) back up; the order is LAYERS in {__file__}")
        return 1
    print(f"layers: none of {includes} includes, {links} CMake links and {paths} paths CMake "
          "names runs back up (the checker found the made-up tree's 4 edges back up)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
