#!/usr/bin/python3
"""Compiles a kernel tree's mm/zsmalloc.c unchanged in userspace, against the shims of kernel/
(kshim.h, one-line forwarding headers, kservices.c), with the kernel's code-generation flags
and its config, so that the kernel's own allocator can be driven, counted and compared.

The tree is a directory holding mm/zsmalloc.c and include/linux/zsmalloc.h (a checkout, an
unpacked linux-source), or, by default, Debian's linux-source-6.1 package: only the files the
build needs are unpacked from /usr/src/linux-source-6.1.tar.xz into the build folder. Nothing of
the tree is ever written into this repository.

Per variant (a name, and the source change it is built with: none, the mail's attribute change
or a patch file), the file is copied into the build folder, changed there, compiled as C with
the kernel's flags, and its symbols renamed into a C++ namespace (zsm::bench_<variant>::zs_malloc()
and so on, mangled as functions without parameters), so that two variants link into one binary
and tools/lib/ab_analysis.py reads their sizes and calls as it reads zsm's. kapi.h, generated,
names each variant's symbols for the drivers (kernel/kapi.h).

The config (the tree's .config, --config FILE, or Debian's defaults below) decides the CONFIG_
options zsmalloc.c tests (kconfig.h) and the flags (stack auto-init, ftrace entry NOP, stack
protector, return and indirect-branch thunks, -O2/-Os). An option zsmalloc.c tests that the
shims do not model, set in the config, stops the build with one line naming it; so does a kernel
interface the shims lack (the compiler's first error, mapped to the interface).

Usage (kernel.cmake runs it for the differential test; tools/lib/kernel_ab.py imports it):
  kernel_build.py --out DIR [--tree TREE] [--config FILE] [--set CONFIG_X=VALUE]...
                  [--compiler gcc|clang|clang22] [--variant NAME[=none|mail|PATCH]]...
                  [--namespace-prefix zsm::bench_]
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

import build_inputs

KERNEL_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(KERNEL_DIR)
DEBIAN_TARBALL = "/usr/src/linux-source-6.1.tar.xz"
DEBIAN_TOP = "linux-source-6.1"
# The files of a tree the build reads (mm/zpdesc.h exists in newer trees only).
TREE_FILES = ("mm/zsmalloc.c", "mm/zpdesc.h", "include/linux/zsmalloc.h", "Makefile")

COMPILERS = ("gcc", "clang", "clang22")
ARCHES = ("x86_64", "arm64")
# Per architecture and compiler, the C and C++ compiler commands: the host's for x86-64; for
# arm64, Debian's cross gcc 12 and the clangs with their arm64 target (the cross gcc's C
# library and linker).
_CLANG_ARM64 = "--target=aarch64-linux-gnu"
TOOLCHAINS = {
    "x86_64": {"gcc": (["gcc-12"], ["g++-12"]), "clang": (["clang-19"], ["clang++-19"]),
               "clang22": (["clang-22"], ["clang++-22"])},
    "arm64": {"gcc": (["aarch64-linux-gnu-gcc-12"], ["aarch64-linux-gnu-g++-12"]),
              "clang": (["clang-19", _CLANG_ARM64], ["clang++-19", _CLANG_ARM64]),
              "clang22": (["clang-22", _CLANG_ARM64], ["clang++-22", _CLANG_ARM64])},
}
# Where kernel/kshim_arm64.h puts the task (from the thread pointer) and the canary in it.
ARM64_TASK_TP_OFFSET = 16
ARM64_TASK_CANARY_OFFSET = 32
# The binutils that read each architecture's objects (nm, objcopy, objdump).
BINUTILS_PREFIX = {"x86_64": "", "arm64": "aarch64-linux-gnu-"}


def toolchain(compiler, arch="x86_64"):
    """(C compiler command, C++ compiler command), each a list."""
    return TOOLCHAINS[arch][compiler]


def binutil(tool, arch="x86_64"):
    return BINUTILS_PREFIX[arch] + tool

# Every header zsmalloc.c (any form so far) and zpdesc.h include, forwarded to kshim.h.
# linux/zsmalloc.h is the tree's own.
FORWARDS = [f"linux/{h}.h" for h in (
    "module", "kernel", "sched", "bitops", "errno", "highmem", "string", "slab", "pgtable",
    "cpumask", "cpu", "vmalloc", "preempt", "spinlock", "shrinker", "types", "debugfs",
    "zpool", "migrate", "wait", "pagemap", "fs", "local_lock", "scatterlist", "sprintf",
    "workqueue", "mm", "page-flags", "rwlock", "atomic", "list", "compiler", "init", "magic",
    "mm_types", "rmap", "swap", "gfp", "percpu", "lockdep", "export", "build_bug", "minmax",
    "math", "err", "printk", "bug", "kmsan", "mmzone", "vmstat")] + ["asm/tlbflush.h"]

# The configurations a run can be given by name (--preset), and the default of each
# architecture when the tree has no .config and no --config is given. None is read from a file:
# Debian's packages ship the source without their .config, so the Debian presets are Debian's
# kernels as their packaging is known (zsmalloc as a module, no zsmalloc stats, no DEBUG_VM,
# compaction and migration on, PREEMPT_DYNAMIC, function tracer with dynamic ftrace, strong
# stack protector; amd64: retpolines and return thunks; arm64: pointer authentication of return
# addresses, BTI (which Kconfig allows with clang only), the per-task stack canary), with
# Kconfig's default for stack auto-init with a compiler that zero-initialises
# (security/Kconfig.hardening). The GKI-like preset is arch/arm64/configs/gki_defconfig of an
# Android common kernel as far as it changes zsmalloc's code or its flags: zsmalloc built in,
# full preemption, the shadow call stack patched in at boot from PAC (UNWIND_PATCH_PAC_INTO_SCS:
# the code is built with pac-ret and x18 reserved), kCFI, UBSAN array bounds that trap, no
# function tracer; LTO and KASAN_HW_TAGS (MTE) are left out, as the shims do not model them.
# --config overrides every preset.
_COMMON = {
    "CONFIG_ZSMALLOC_STAT": "n", "CONFIG_DEBUG_VM": "n", "CONFIG_COMPACTION": "y",
    "CONFIG_MIGRATION": "y", "CONFIG_ZSMALLOC_CHAIN_SIZE": "8", "CONFIG_ZPOOL": "y",
    "CONFIG_INIT_STACK_ALL_ZERO": "y", "CONFIG_STACKPROTECTOR": "y",
    "CONFIG_STACKPROTECTOR_STRONG": "y", "CONFIG_CC_OPTIMIZE_FOR_PERFORMANCE": "y",
    "CONFIG_SMP": "y", "CONFIG_64BIT": "y", "CONFIG_MMU": "y",
}
DEBIAN_DEFAULTS = {
    **_COMMON, "CONFIG_ZSMALLOC": "m", "CONFIG_FUNCTION_TRACER": "y",
    "CONFIG_DYNAMIC_FTRACE": "y", "CONFIG_RETPOLINE": "y", "CONFIG_RETHUNK": "y",
    "CONFIG_X86_64": "y",
}
DEBIAN_ARM64 = {
    **_COMMON, "CONFIG_ZSMALLOC": "m", "CONFIG_FUNCTION_TRACER": "y",
    "CONFIG_DYNAMIC_FTRACE": "y", "CONFIG_DYNAMIC_FTRACE_WITH_REGS": "y",
    "CONFIG_PREEMPT_DYNAMIC": "y", "CONFIG_ARM64": "y", "CONFIG_ARM64_LSE_ATOMICS": "y",
    "CONFIG_ARM64_PTR_AUTH_KERNEL": "y", "CONFIG_ARM64_BTI_KERNEL": "y",
    "CONFIG_STACKPROTECTOR_PER_TASK": "y",
}
GKI_ARM64 = {
    **_COMMON, "CONFIG_ZSMALLOC": "y", "CONFIG_ZPOOL": "n", "CONFIG_FUNCTION_TRACER": "n",
    "CONFIG_PREEMPT": "y", "CONFIG_ARM64": "y", "CONFIG_ARM64_LSE_ATOMICS": "y",
    "CONFIG_ARM64_PTR_AUTH_KERNEL": "y", "CONFIG_ARM64_BTI_KERNEL": "n",
    "CONFIG_SHADOW_CALL_STACK": "y", "CONFIG_UNWIND_PATCH_PAC_INTO_SCS": "y",
    "CONFIG_STACKPROTECTOR_PER_TASK": "y", "CONFIG_CFI_CLANG": "y", "CONFIG_UBSAN": "y",
    "CONFIG_UBSAN_TRAP": "y", "CONFIG_UBSAN_BOUNDS": "y", "CONFIG_UBSAN_ARRAY_BOUNDS": "y",
}
PRESETS = {  # name: (architecture, description in the report, options)
    "debian-amd64": ("x86_64", "Debian 6.1 amd64 defaults (kernel/kernel_build.py)",
                     DEBIAN_DEFAULTS),
    "debian-arm64": ("arm64", "Debian 6.1 arm64 defaults (kernel/kernel_build.py)",
                     DEBIAN_ARM64),
    "gki-arm64": ("arm64", "Android GKI-like arm64 (gki_defconfig's zsmalloc-relevant options, "
                  "kernel/kernel_build.py)", GKI_ARM64),
}
DEFAULT_PRESET = {"x86_64": "debian-amd64", "arm64": "debian-arm64"}
# Options that change only the flags (kernel_flags()), listed in the report when set.
FLAG_OPTIONS = (
    "CONFIG_FUNCTION_TRACER", "CONFIG_DYNAMIC_FTRACE", "CONFIG_DYNAMIC_FTRACE_WITH_REGS",
    "CONFIG_DYNAMIC_FTRACE_WITH_ARGS", "CONFIG_DYNAMIC_FTRACE_WITH_CALL_OPS",
    "CONFIG_STACKPROTECTOR", "CONFIG_STACKPROTECTOR_STRONG", "CONFIG_STACKPROTECTOR_PER_TASK",
    "CONFIG_INIT_STACK_ALL_ZERO", "CONFIG_INIT_STACK_ALL_PATTERN", "CONFIG_RETPOLINE",
    "CONFIG_RETHUNK", "CONFIG_CC_OPTIMIZE_FOR_SIZE", "CONFIG_ARM64_PTR_AUTH_KERNEL",
    "CONFIG_ARM64_BTI_KERNEL", "CONFIG_SHADOW_CALL_STACK", "CONFIG_UNWIND_PATCH_PAC_INTO_SCS",
    "CONFIG_CFI_CLANG", "CONFIG_UBSAN_BOUNDS", "CONFIG_UBSAN_ARRAY_BOUNDS",
    "CONFIG_UBSAN_LOCAL_BOUNDS", "CONFIG_UBSAN_TRAP", "CONFIG_ZERO_CALL_USED_REGS",
    "CONFIG_PREEMPT_DYNAMIC", "CONFIG_PREEMPT",
)
# CONFIG_ options that kconfig.h passes on to the code as the config sets them.
MODELLED = {"CONFIG_DEBUG_VM", "CONFIG_ZSMALLOC_STAT", "CONFIG_COMPACTION", "CONFIG_MIGRATION",
            "CONFIG_ZSMALLOC_CHAIN_SIZE", "CONFIG_SMP", "CONFIG_64BIT", "CONFIG_X86_64",
            "CONFIG_ARM64", "CONFIG_MMU", "CONFIG_ZSMALLOC"}
# Tested by the shims themselves (kernel/kshim.h: VM_BUG_ON() and friends), whether or not
# zsmalloc.c names them.
SHIM_OPTIONS = ("CONFIG_DEBUG_VM",)
# Tested by zsmalloc.c but off here whatever the config says, with the reason.
FORCED_OFF = {"CONFIG_ZPOOL": "the zpool front end is not modelled; drivers call zs_* directly",
              "CONFIG_ZSMALLOC_STAT_DEBUGFS": "not modelled"}
# Options that change the primitives' shape, which the shims do not model: set, they stop
# the build.
NOT_MODELLED = ("CONFIG_PREEMPT_RT", "CONFIG_DEBUG_SPINLOCK", "CONFIG_DEBUG_LOCK_ALLOC",
                "CONFIG_LOCKDEP", "CONFIG_KASAN", "CONFIG_KCSAN", "CONFIG_KMSAN",
                "CONFIG_HIGHMEM", "CONFIG_DEBUG_KMAP_LOCAL_FORCE_MAP", "CONFIG_DEBUG_LIST",
                "CONFIG_LIST_HARDENED", "CONFIG_DEBUG_PREEMPT", "CONFIG_KCOV_INSTRUMENT_ALL",
                "CONFIG_GCOV_PROFILE_ALL", "CONFIG_LTO_CLANG", "CONFIG_KASAN_HW_TAGS",
                "CONFIG_ARM64_MTE_KERNEL", "CONFIG_CPU_BIG_ENDIAN")
# Set on the other architecture's kernels only: such a config is for the other --arch.
ARCH_ONLY = {"x86_64": ("CONFIG_X86_64",), "arm64": ("CONFIG_ARM64",)}
# The mail's attribute change: (function, attribute) on its `static` definition.
MAIL_CHANGE = (("obj_malloc", "__always_inline"), ("obj_free", "__always_inline"),
               ("obj_write", "__always_inline"), ("alloc_zspage", "noinline"))
# The API whose symbols kapi.h names, when the object defines them.
API = ("zs_create_pool", "zs_destroy_pool", "zs_malloc", "zs_free", "zs_map_object",
       "zs_unmap_object", "zs_obj_write", "zs_obj_read_begin", "zs_obj_read_end", "zs_store",
       "zs_compact", "zs_get_total_pages", "zs_pool_stats", "zs_huge_class_size",
       "zs_lookup_class_index", "kshim_module_init", "kshim_module_exit")


class BuildError(build_inputs.InputError):
    """A build that cannot go on; the message is one line."""


# --- the tree ---------------------------------------------------------------------------------

def unpack_debian(dest):
    """Debian's linux-source-6.1 files the build needs, unpacked once into dest; the tree."""
    tree = os.path.join(dest, DEBIAN_TOP)
    stamp = os.path.join(tree, ".unpacked")
    if not os.path.exists(DEBIAN_TARBALL):
        raise BuildError(f"{DEBIAN_TARBALL} is missing: install the Debian package "
                         "linux-source-6.1 (tools/setup.sh does)")
    mtime = str(os.path.getmtime(DEBIAN_TARBALL))
    if os.path.exists(stamp) and open(stamp).read() == mtime:
        return tree
    wanted = {f"{DEBIAN_TOP}/{f}" for f in TREE_FILES}
    with tarfile.open(DEBIAN_TARBALL, "r:xz") as tar:
        members = [m for m in tar if m.name in wanted]
        tar.extractall(dest, members=members)
    with open(stamp, "w") as fh:
        fh.write(mtime)
    return tree


def tree_version(tree):
    """'6.1.192'-style version from the tree's Makefile, or '' when it has none."""
    path = os.path.join(tree, "Makefile")
    if not os.path.isfile(path):
        return ""
    with open(path, errors="replace") as fh:
        text = fh.read(4000)
    parts = [re.search(rf"^{k}\s*=\s*(\S*)", text, re.M) for k in ("VERSION", "PATCHLEVEL",
                                                                   "SUBLEVEL")]
    return ".".join(p.group(1) for p in parts if p and p.group(1))


def detect_form(source):
    """What the file's API looks like: its name, and the pairs it can run."""
    has = {fn: re.search(rf"^\S.*\b{fn}\s*\(", source, re.M) is not None
           for fn in ("zs_obj_write", "zs_store", "zs_map_object")}
    zpdesc = '#include "zpdesc.h"' in source
    nid = re.search(r"^unsigned long zs_malloc\([^)]*\bnid\b", source, re.M) is not None
    if has["zs_obj_write"]:
        name = "2026 (zpdesc, zs_obj_write)" if zpdesc else "zs_obj_write"
    elif has["zs_map_object"]:
        name = "6.1 (zs_map_object)"
    else:
        raise BuildError("mm/zsmalloc.c has neither zs_obj_write() nor zs_map_object(): "
                         "a form the drivers do not know")
    families = ["write"] + (["store"] if has["zs_store"] else [])
    if has["zs_store"] and not re.search(
            r"^unsigned long zs_store\(struct zs_pool \*\w+,\s*(const )?void \*\w+,\s*"
            r"size_t \w+,\s*gfp_t \w+(,\s*(const )?int \w+)?\)", source, re.M):
        raise BuildError("zs_store() has a signature the drivers do not know (expected "
                         "pool, src, size, gfp[, nid])")
    return {"name": name, "write_api": "obj_write" if has["zs_obj_write"] else "map",
            "families": families, "zpdesc": zpdesc, "malloc_nid": nid}


# --- the config -------------------------------------------------------------------------------

def read_config(path, what="--config"):
    """{CONFIG_X: value} from a .config ('n' for '# CONFIG_X is not set')."""
    cfg = {}
    for line in build_inputs.read_text(path, what).splitlines():
        m = re.match(r"^(CONFIG_\w+)=(.*)$", line.strip())
        if m:
            cfg[m.group(1)] = m.group(2).strip('"')
        m = re.match(r"^# (CONFIG_\w+) is not set", line)
        if m:
            cfg[m.group(1)] = "n"
    return cfg


def choose_config(tree, config_file, preset=None, arch="x86_64"):
    """(config, description): --config FILE, else --preset NAME, else the tree's .config, else
    the architecture's default preset."""
    if config_file:
        return read_config(config_file), f"--config {config_file}"
    if preset is None:
        dot = os.path.join(tree, ".config")
        if os.path.lexists(dot):
            return read_config(dot, "the tree's .config"), f"the tree's .config ({dot})"
        preset = DEFAULT_PRESET[arch]
    preset_arch, description, options = PRESETS[preset]
    if preset_arch != arch:
        raise BuildError(f"--preset {preset} is an {preset_arch} configuration: run it with "
                         f"--arch {preset_arch}")
    return dict(options), f"{description} [preset {preset}]"


# Options with a range (mm/Kconfig), checked before anything is compiled.
RANGES = {"CONFIG_ZSMALLOC_CHAIN_SIZE": (4, 16)}


def check_config(cfg, cfg_name, arch="x86_64"):
    """Stops on a value out of its option's range, or on a config of the other architecture,
    naming the option and where it came from."""
    for other, keys in ARCH_ONLY.items():
        for key in keys:
            if other != arch and enabled(cfg, key):
                raise BuildError(f"{cfg_name} is a config for {other} ({key}=y): run it with "
                                 f"--arch {other}")
    unmodelled = [
        (arch == "arm64" and enabled(cfg, "CONFIG_SHADOW_CALL_STACK")
         and not enabled(cfg, "CONFIG_UNWIND_PATCH_PAC_INTO_SCS"),
         "CONFIG_SHADOW_CALL_STACK is set without CONFIG_UNWIND_PATCH_PAC_INTO_SCS: a "
         "compiled-in shadow call stack needs x18 kept across libc, which the shims do not do"),
        (arch == "arm64" and enabled(cfg, "CONFIG_FUNCTION_TRACER")
         and not any(enabled(cfg, f"CONFIG_DYNAMIC_FTRACE_WITH_{k}") for k in ("REGS", "ARGS")),
         "CONFIG_FUNCTION_TRACER is set without CONFIG_DYNAMIC_FTRACE_WITH_REGS or _ARGS: "
         "arm64's -pg (_mcount) tracer is not modelled"),
        (enabled(cfg, "CONFIG_UBSAN") and enabled(cfg, "CONFIG_UBSAN_BOUNDS")
         and not enabled(cfg, "CONFIG_UBSAN_TRAP"),
         "CONFIG_UBSAN_BOUNDS is set without CONFIG_UBSAN_TRAP: UBSAN's report handlers are "
         "not modelled"),
    ]
    for key in NOT_MODELLED:
        if enabled(cfg, key):
            raise BuildError(f"config option {key} is set, and the shims do not model it "
                             "(kernel/kshim.h)")
    for is_set, why in unmodelled:
        if is_set:
            raise BuildError(f"config option {why} ({cfg_name})")
    for key, (lo, hi) in RANGES.items():
        if key not in cfg:
            continue
        value = cfg[key]
        if not re.fullmatch(r"\d+", value) or not lo <= int(value) <= hi:
            raise BuildError(f"config option {key}={value} ({cfg_name}): expected an integer "
                             f"{lo}..{hi} (mm/Kconfig's range)")


def enabled(cfg, key):
    return cfg.get(key, "n") not in ("n", "")


def kconfig_header(cfg, sources):
    """kconfig.h's text and the list of the options it decided, for the report."""
    used = sorted(set(re.findall(r"\bCONFIG_\w+", "\n".join(sources))) | set(SHIM_OPTIONS))
    lines, decided = ["/* Generated by kernel/kernel_build.py from the kernel config. */"], []
    for key in used:
        if key in FORCED_OFF:
            decided.append(f"{key}=off ({FORCED_OFF[key]})")
            continue
        if key not in MODELLED:
            if enabled(cfg, key):
                raise BuildError(f"mm/zsmalloc.c tests {key}, set in the config, and the "
                                 "shims do not model it")
            continue
        value = cfg.get(key, "n")
        if value in ("y", "m"):
            lines.append(f"#define {key} 1")
        elif value not in ("n", ""):
            lines.append(f"#define {key} {value}")
        decided.append(f"{key}={value}")
    if "CONFIG_ZSMALLOC_CHAIN_SIZE" in used and "CONFIG_ZSMALLOC_CHAIN_SIZE" not in cfg:
        lines.append("#define CONFIG_ZSMALLOC_CHAIN_SIZE 8")
    return "\n".join(lines) + "\n", decided


# --- flags ------------------------------------------------------------------------------------

def accepts(cc, flag):
    """Whether the compiler (a command list) takes the flag (the kernel's cc-option)."""
    proc = subprocess.run([*cc, "-Werror", *flag.split(), "-c", "-x", "c", "-", "-o",
                           os.devnull], input="int x;", text=True, capture_output=True)
    return proc.returncode == 0


def kernel_flags(compiler, cfg, arch="x86_64"):
    """The kernel's code-generation flags for this compiler, config and architecture (the top
    Makefile and arch/<arch>/Makefile), for a userspace process: -mcmodel=small for x86-64's
    -mcmodel=kernel, and on arm64 the per-task stack canary read through tpidr_el0 where the
    kernel reads sp_el0 (kernel/kshim_arm64.h)."""
    cc = toolchain(compiler, arch)[0]
    clang = compiler.startswith("clang")
    flags = (x86_64_flags if arch == "x86_64" else arm64_flags)(cc, clang, cfg)
    flags += common_option_flags(cc, clang, cfg)
    flags += ["-D__KERNEL__", '-DKBUILD_MODNAME="zsmalloc"', "-DKBUILD_BASENAME=\"zsmalloc\"",
              "-Werror=implicit-function-declaration", "-Werror=implicit-int",
              "-Werror=return-type", "-Werror=incompatible-pointer-types", "-Wno-unused",
              "-Wno-sign-compare", "-Wno-pointer-sign", "-Wno-address-of-packed-member"]
    if clang:
        flags += ["-Wno-gnu-variable-sized-type-not-at-end", "-Wno-initializer-overrides",
                  "-Wno-unknown-warning-option", "-Wno-gnu", "-Wno-unused-command-line-argument"]
    return flags


def stack_flags(cfg):
    """Stack protector strength and stack auto-init (the top Makefile)."""
    if enabled(cfg, "CONFIG_STACKPROTECTOR_STRONG"):
        flags = ["-fstack-protector-strong"]
    elif enabled(cfg, "CONFIG_STACKPROTECTOR"):
        flags = ["-fstack-protector"]
    else:
        flags = ["-fno-stack-protector"]
    if enabled(cfg, "CONFIG_INIT_STACK_ALL_ZERO"):
        flags.append("-ftrivial-auto-var-init=zero")
    elif enabled(cfg, "CONFIG_INIT_STACK_ALL_PATTERN"):
        flags.append("-ftrivial-auto-var-init=pattern")
    return flags


def x86_64_flags(cc, clang, cfg):
    """arch/x86/Makefile's flags and the top Makefile's, in the order the kernel gives them."""
    flags = ["-std=gnu11", "-Os" if enabled(cfg, "CONFIG_CC_OPTIMIZE_FOR_SIZE") else "-O2",
             "-fno-strict-aliasing", "-fno-common", "-fshort-wchar", "-fno-PIE", "-fno-pic",
             "-m64", "-mno-sse", "-mno-mmx", "-mno-sse2", "-mno-3dnow", "-mno-avx",
             "-mno-80387", "-mtune=generic", "-mno-red-zone", "-mcmodel=small",
             "-fno-asynchronous-unwind-tables", "-fno-delete-null-pointer-checks",
             "-fno-strict-overflow", "-fcf-protection=none", "-fno-stack-clash-protection",
             "-gdwarf-4"]
    # What the kernel passes through cc-option: taken where this compiler has it.
    optional = ["-mno-fp-ret-in-387", "-mskip-rax-setup", "-fno-stack-check", "-fconserve-stack",
                "-falign-jumps=1", "-falign-loops=1", "-fno-allow-store-data-races"]
    flags += [f for f in optional if accepts(cc, f)]
    flags += ["-mstack-alignment=8"] if clang else ["-mpreferred-stack-boundary=3"]
    if enabled(cfg, "CONFIG_RETPOLINE"):
        flags += ["-mretpoline-external-thunk"] if clang else \
            ["-mindirect-branch=thunk-extern", "-mindirect-branch-register"]
        flags.append("-fno-jump-tables")
        if not clang and accepts(cc, "-mindirect-branch-cs-prefix"):
            flags.append("-mindirect-branch-cs-prefix")
    if enabled(cfg, "CONFIG_RETHUNK"):
        flags.append("-mfunction-return=thunk-extern")
    flags += stack_flags(cfg)
    if enabled(cfg, "CONFIG_FUNCTION_TRACER"):
        # Dynamic ftrace leaves a 5-byte NOP at every traced function's entry: gcc writes it
        # itself, clang as a patchable entry of 5 bytes (one NOP); without dynamic ftrace the
        # entry calls __fentry__.
        if not enabled(cfg, "CONFIG_DYNAMIC_FTRACE"):
            flags += ["-pg", "-mfentry"]
        elif clang:
            flags += ["-fpatchable-function-entry=5", "-DCC_USING_PATCHABLE_FUNCTION_ENTRY"]
        else:
            flags += ["-pg", "-mfentry", "-mnop-mcount", "-mrecord-mcount"]
    return flags


def arm64_flags(cc, clang, cfg):
    """arch/arm64/Makefile's flags and the top Makefile's. arm64 selects FRAME_POINTER, so
    there are frame pointers and no sibling calls; the compiler's atomics stay inline
    (kshim_arm64.h's LL/SC fallback)."""
    flags = ["-std=gnu11", "-Os" if enabled(cfg, "CONFIG_CC_OPTIMIZE_FOR_SIZE") else "-O2",
             "-fno-strict-aliasing", "-fno-common", "-fshort-wchar", "-fno-PIE", "-fno-pic",
             "-mgeneral-regs-only", "-mlittle-endian",
             "-fno-asynchronous-unwind-tables", "-fno-unwind-tables",
             "-fno-delete-null-pointer-checks", "-fno-strict-overflow",
             "-fno-stack-clash-protection", "-fno-omit-frame-pointer",
             "-fno-optimize-sibling-calls", "-mno-outline-atomics", "-gdwarf-4"]
    optional = ["-mabi=lp64", "-fno-stack-check", "-fconserve-stack",
                "-fno-allow-store-data-races", "-Wno-psabi"]
    flags += [f for f in optional if accepts(cc, f)]
    if enabled(cfg, "CONFIG_ARM64_PTR_AUTH_KERNEL"):
        # pac-ret+leaf; without leaf functions where SCS is patched in from PAC at boot; BTI
        # landing pads where the config has them and the compiler is clang (Kconfig: BTI_KERNEL
        # depends on !CC_IS_GCC).
        pac = "pac-ret" if enabled(cfg, "CONFIG_UNWIND_PATCH_PAC_INTO_SCS") else "pac-ret+leaf"
        if enabled(cfg, "CONFIG_ARM64_BTI_KERNEL") and clang:
            pac += "+bti"
        flags.append(f"-mbranch-protection={pac}")
    else:
        flags.append("-mbranch-protection=none")
    if enabled(cfg, "CONFIG_SHADOW_CALL_STACK"):  # patched in from PAC (check_config())
        flags.append("-ffixed-x18")
    flags += stack_flags(cfg)
    if enabled(cfg, "CONFIG_STACKPROTECTOR") and enabled(cfg, "CONFIG_STACKPROTECTOR_PER_TASK"):
        offset = ARM64_TASK_TP_OFFSET + ARM64_TASK_CANARY_OFFSET
        # clang takes sp_el0 only: compile_c() turns its reads into tpidr_el0 reads.
        reg = "sp_el0" if clang else "tpidr_el0"
        flags += ["-mstack-protector-guard=sysreg", f"-mstack-protector-guard-reg={reg}",
                  f"-mstack-protector-guard-offset={offset}"]
    if enabled(cfg, "CONFIG_FUNCTION_TRACER"):
        # Two NOPs at every traced function's entry (DYNAMIC_FTRACE_WITH_REGS/ARGS), with two
        # more before it for the call ops (DYNAMIC_FTRACE_WITH_CALL_OPS).
        if enabled(cfg, "CONFIG_DYNAMIC_FTRACE_WITH_CALL_OPS"):
            flags += ["-fpatchable-function-entry=4,2", "-DCC_USING_PATCHABLE_FUNCTION_ENTRY"]
        else:  # DYNAMIC_FTRACE_WITH_REGS or _ARGS (check_config())
            flags += ["-fpatchable-function-entry=2", "-DCC_USING_PATCHABLE_FUNCTION_ENTRY"]
    return flags


def common_option_flags(cc, clang, cfg):
    """Flags of options both architectures have, none of which Debian's defaults set: kCFI
    (clang only, as Kconfig allows), UBSAN's bounds checks with traps, zeroing used registers
    at return."""
    flags = []
    if enabled(cfg, "CONFIG_CFI_CLANG") and clang:
        flags.append("-fsanitize=kcfi")
    if enabled(cfg, "CONFIG_UBSAN") and enabled(cfg, "CONFIG_UBSAN_BOUNDS"):
        flags.append("-fsanitize=array-bounds" if clang else "-fsanitize=bounds")
        if enabled(cfg, "CONFIG_UBSAN_LOCAL_BOUNDS") and clang:
            flags.append("-fsanitize=local-bounds")
        flags.append("-fsanitize-undefined-trap-on-error")
    if enabled(cfg, "CONFIG_ZERO_CALL_USED_REGS"):
        flags.append("-fzero-call-used-regs=used-gpr")
    return flags


# --- compiling, and what a failure means --------------------------------------------------------

FIRST_ERROR = [  # (pattern on the compiler's first error, what the line says is missing)
    (r"fatal error: '?((?:linux|asm)/[\w./-]+)'?(?:: No such file| file not found)",
     "header <{}>"),
    (r"implicit declaration of function '(\w+)'", "function {}()"),
    (r"call to undeclared function '(\w+)'", "function {}()"),
    (r"unknown type name '(\w+)'", "type {}"),
    (r"'(\w+)' undeclared", "identifier {}"),
    (r"use of undeclared identifier '(\w+)'", "identifier {}"),
    (r"has no member named '(\w+)'", "struct member .{}"),
    (r"no member named '(\w+)' in", "struct member .{}"),
    (r"storage size of '(\w+)' isn't known", "the size of {}'s type"),
    (r"(?:incomplete type|incomplete definition of type) '([\w ]+)'", "type {}"),
]


def compile_c(cc, flags, source, obj, log):
    """cc -c source -o obj with flags. Code that reads its stack canary from sp_el0 (clang's one
    register for -mstack-protector-guard=sysreg, which EL0 cannot read) goes through assembly
    with those reads made reads of tpidr_el0, the register the task hangs from here
    (kernel/kshim_arm64.h): the same instruction at the same place."""
    if "-mstack-protector-guard-reg=sp_el0" not in flags:
        return run([*cc, *flags, "-c", source, "-o", obj], log)
    asm = obj + ".s"
    if not run([*cc, *flags, "-S", source, "-o", asm], log):
        return False
    with open(asm) as fh:
        text = fh.read()
    with open(asm, "w") as fh:
        fh.write(re.sub(r"\bsp_el0\b", "tpidr_el0", text, flags=re.I))
    # Assembling only: the architecture level admits the inline LSE instructions (the kernel
    # passes its assembler -march=armv8.x-a, asm-arch, likewise).
    return run([*cc, *flags, "-march=armv8.1-a", "-c", asm, "-o", obj], log)


def explain(log_text, source_name):
    """One line: which interface the first compiler error says is missing."""
    for line in log_text.splitlines():
        if not re.search(r"(^|: )(fatal )?error: ", line):
            continue
        for pattern, what in FIRST_ERROR:
            m = re.search(pattern, line)
            if m:
                where = re.match(r"^([^:]+:\d+)", line)
                at = f" ({where.group(1)})" if where else ""
                return (f"{source_name} uses a kernel interface the shims do not have: "
                        f"{what.format(m.group(1))}{at}")
        return f"{source_name} does not compile against the shims: {line.strip()}"
    return f"{source_name} does not compile against the shims (see the log)"


def run(cmd, log, cwd=None):
    with open(log, "a") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=cwd,
                              env=dict(os.environ, LC_ALL="C"))
    return proc.returncode == 0


def log_tail(log):
    with open(log, errors="replace") as fh:
        return fh.read().split("$ ")[-1]


def apply_change(src_dir, variant, change, log):
    """Changes the copy of the tree's files for one variant; the functions it changed."""
    path = os.path.join(src_dir, "mm", "zsmalloc.c")
    if change == "none":
        return []
    if change == "mail":
        text = open(path).read()
        changed = []
        for fn, attr in MAIL_CHANGE:
            pattern = re.compile(rf"^static\s+((?:inline\s+)?)([^\n(;=]*?\b{fn})\s*\(", re.M)
            m = pattern.search(text)
            if not m:
                continue
            text = text[:m.start()] + f"static {attr} {m.group(2)}(" + text[m.end():]
            changed.append(f"{fn}: {attr}")
        if not any(c.startswith("obj_malloc") for c in changed):
            raise BuildError("the mail's change needs a static obj_malloc() in mm/zsmalloc.c")
        with open(path, "w") as fh:
            fh.write(text)
        return changed
    if not run(["patch", "-p1", "--forward", "--batch", "-i", os.path.abspath(change)], log,
               cwd=src_dir):
        raise BuildError(f"patch {change} does not apply to the tree (variant {variant}; "
                         f"log {log})")
    return [f"patch {change}"]


def mangle(prefix_parts, name, function):
    """The Itanium-mangled name of namespace::name (a function without parameters, or a
    variable), with a GCC/clang clone suffix (.isra.0, .cold, ...) kept after it."""
    base, dot, suffix = name.partition(".")
    if not re.fullmatch(r"[A-Za-z_]\w*", base):
        return None
    nested = "".join(f"{len(p)}{p}" for p in prefix_parts)
    return f"_ZN{nested}{len(base)}{base}E{'v' if function else ''}{dot}{suffix}"


def rename_into(obj, out_obj, namespace, log, arch="x86_64"):
    """objcopy's --redefine-syms with every symbol obj defines moved into namespace."""
    parts = namespace.split("::")
    nm = subprocess.run([binutil("nm", arch), "--defined-only", "-P", obj], check=True,
                        capture_output=True, text=True).stdout
    pairs = []
    for line in nm.splitlines():
        fields = line.split()
        if len(fields) < 2 or fields[1] in ("a", "A", "N", "U"):
            continue
        new = mangle(parts, fields[0], fields[1] in "tTwW")
        if new:
            pairs.append((fields[0], new))
    mapfile = out_obj + ".syms"
    with open(mapfile, "w") as fh:
        fh.writelines(f"{a} {b}\n" for a, b in pairs)
    if not run([binutil("objcopy", arch), f"--redefine-syms={mapfile}", obj, out_obj], log):
        raise BuildError(f"objcopy failed (log {log})")
    return {a: b for a, b in pairs}


def write_forwards(include_dir, tree):
    for h in FORWARDS:
        path = os.path.join(include_dir, h)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write('#include "kshim.h"\n')
    shutil.copy(os.path.join(tree, "include", "linux", "zsmalloc.h"),
                os.path.join(include_dir, "linux", "zsmalloc.h"))


def build(out, tree=None, config_file=None, compiler="gcc", variants=(("kernel", "none"),),
          namespace_prefix="zsm::bench_", overrides=(), arch="x86_64", preset=None,
          variant_flags=None):
    """Builds the shared services and every variant's object under out for `arch`; returns
    what was built (also written to out/build.json). variant_flags: {variant: [flags]} added to
    that variant's zsmalloc.c only (the PGO builds' instrumentation and profile)."""
    out = build_inputs.output_dir(out)
    log = os.path.join(out, "build.log")
    open(log, "w").close()
    tree = os.path.abspath(tree) if tree else unpack_debian(os.path.join(out, "..", "tree"))
    source, extra, form = read_tree(tree)
    cfg, cfg_name = choose_config(tree, config_file, preset, arch)
    for key, value in overrides:
        cfg[key] = value
        cfg_name += f", {key}={value}"
    check_config(cfg, cfg_name, arch)
    kconfig, decided = kconfig_header(cfg, [source, *extra])
    include = os.path.join(out, "include")
    write_forwards(include, tree)
    with open(os.path.join(include, "kconfig.h"), "w") as fh:
        fh.write(kconfig)
    cc, cxx = toolchain(compiler, arch)
    flags = kernel_flags(compiler, cfg, arch)
    decided += [f"{k}={cfg[k]}" for k in FLAG_OPTIONS if enabled(cfg, k)]
    common = flags + ["-include", "kconfig.h", "-I", include, "-I", KERNEL_DIR]
    objects = {}
    services = os.path.join(out, "kservices.o")
    if not compile_c(cc, common, os.path.join(KERNEL_DIR, "kservices.c"), services, log):
        raise BuildError(f"kernel/kservices.c does not compile with {cc[0]}: "
                         f"{log_tail(log)[-600:]}")
    host = os.path.join(out, "khost.o")
    if not run([*cc, "-O2", "-gdwarf-4", "-fno-pie", "-c", os.path.join(KERNEL_DIR, "khost.c"),
                "-o", host], log):
        raise BuildError(f"kernel/khost.c does not compile: {log_tail(log)[-600:]}")
    symbols = {}
    changes = {}
    for name, change in variants:
        src = os.path.join(out, f"src-{name}")
        shutil.rmtree(src, ignore_errors=True)
        copy_tree_files(tree, src)
        changes[name] = apply_change(src, name, change, log)
        raw = os.path.join(out, f"{name}.raw.o")
        cfile = os.path.join(src, "mm", "zsmalloc.c")
        extra_flags = (variant_flags or {}).get(name, [])
        if not compile_c(cc, [*common, *extra_flags, "-I", os.path.join(src, "mm")], cfile, raw,
                         log):
            raise BuildError(explain(log_tail(log), f"{tree}/mm/zsmalloc.c"))
        obj = os.path.join(out, f"{name}.o")
        symbols[name] = rename_into(raw, obj, namespace_prefix + name, log, arch)
        objects[name] = obj
    write_kapi(os.path.join(out, "kapi_symbols.h"), symbols, form)
    result = {"tree": tree, "version": tree_version(tree), "form": form, "config": cfg_name,
              "config_options": decided, "compiler": compiler, "arch": arch, "cc": cc,
              "cxx": cxx, "variant_flags": variant_flags or {},
              "flags": flags, "objects": objects, "services": [services, host],
              "changes": changes, "include": out,
              "source_sha256": hashlib.sha256(source.encode()).hexdigest()}
    with open(os.path.join(out, "build.json"), "w") as fh:
        json.dump(result, fh, indent=1)
    return result


def read_tree(tree):
    """(zsmalloc.c's text, [zpdesc.h's text where the file includes it], its form), after
    checking that the tree has every file the build reads."""
    if not os.path.isdir(tree):
        raise BuildError(f"kernel tree {tree}: "
                         f"{'not a folder' if os.path.lexists(tree) else 'no such folder'}")
    c_file = os.path.join(tree, "mm", "zsmalloc.c")
    if not os.path.lexists(c_file):
        raise BuildError(f"{tree} has no mm/zsmalloc.c: not a kernel tree")
    source = build_inputs.read_text(c_file, "the tree's mm/zsmalloc.c")
    form = detect_form(source)
    build_inputs.input_file(os.path.join(tree, "include", "linux", "zsmalloc.h"),
                        "the tree's include/linux/zsmalloc.h (the API mm/zsmalloc.c implements)")
    extra = [build_inputs.read_text(os.path.join(tree, "mm", "zpdesc.h"),
                                "the tree's mm/zpdesc.h (included by mm/zsmalloc.c)")] \
        if form["zpdesc"] else []
    return source, extra, form


def check_inputs(tree, config_file, patch=None, arch="x86_64", preset=None):
    """What build() would stop on in its inputs, checked before any build starts: the tree
    (when one is named), the config and the patch; raises BuildError or build_inputs.InputError."""
    if tree:
        read_tree(os.path.abspath(tree))
    if config_file or preset or tree:
        cfg, name = choose_config(os.path.abspath(tree) if tree else "", config_file, preset,
                                  arch)
        check_config(cfg, name, arch)
    if patch:
        build_inputs.input_file(patch, "--patch")
        if tree:
            check_patch(os.path.abspath(tree), patch)


def check_patch(tree, patch):
    """Stops when `patch` does not apply (-p1) to the tree's files, with patch's first
    complaint; nothing of the tree is changed (a dry run on a copy)."""
    with tempfile.TemporaryDirectory(prefix="kernel-patch-check-") as tmp:
        copy_tree_files(tree, tmp)
        try:
            proc = subprocess.run(["patch", "-p1", "--dry-run", "--forward", "--batch", "-i",
                                   os.path.abspath(patch)], cwd=tmp, capture_output=True,
                                  env=dict(os.environ, LC_ALL="C"))
        except FileNotFoundError:
            raise BuildError("--patch needs the program patch: install the Debian package "
                             "patch (tools/setup.sh does)")
    if proc.returncode != 0:
        said = (proc.stdout + proc.stderr).decode(errors="replace").strip().splitlines()
        raise BuildError(f"--patch {patch}: does not apply (-p1) to {tree}: "
                         f"{said[-1] if said else 'patch failed'}")


def copy_tree_files(tree, dest):
    """The tree's files the build compiles (TREE_FILES but the Makefile), copied under dest."""
    for f in TREE_FILES[:3]:
        if os.path.exists(os.path.join(tree, f)):
            os.makedirs(os.path.dirname(os.path.join(dest, f)), exist_ok=True)
            shutil.copy(os.path.join(tree, f), os.path.join(dest, f))


def write_kapi(path, symbols, form):
    """KZS_SYM_<variant>_<function>: the asm name of each variant's API function; the form's
    macros (kernel/kapi.h)."""
    lines = ["/* Generated by kernel/kernel_build.py: the renamed symbols of each variant. */",
             "#define KZS_FORM_MAP 1" if form["write_api"] == "map" else
             "#define KZS_FORM_OBJ_WRITE 1"]
    if form["malloc_nid"]:
        lines.append("#define KZS_MALLOC_NID 1")
    if "store" in form["families"]:
        lines.append("#define KZS_STORE_SRC_FIRST 1")
    for variant, table in symbols.items():
        for fn in API:
            if fn in table:
                lines.append(f'#define KZS_SYM_{variant}_{fn} "{table[fn]}"')
                lines.append(f"#define KZS_HAS_{variant}_{fn} 1")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def parse_variant(text):
    name, _, change = text.partition("=")
    if not re.fullmatch(r"[a-z_]\w*", name):
        raise argparse.ArgumentTypeError(f"variant name {name!r}: expected a lower-case "
                                         "identifier")
    if change not in ("", "none", "mail"):
        try:
            build_inputs.input_file(change, f"the patch of variant {name}")
        except build_inputs.InputError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return name, change or "none"


def namespace(text):
    """--namespace-prefix: C++ namespaces to which a variant's name is appended."""
    if not re.fullmatch(r"([A-Za-z_]\w*::)*[A-Za-z_]\w*", text + "v"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected C++ namespace names joined by "
                                         "::, e.g. zsm::bench_")
    return text


def main():
    ap = build_inputs.OneLineParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tree", help="kernel tree (default: Debian's linux-source-6.1)")
    ap.add_argument("--config", help="kernel .config (default: the tree's, else Debian's)")
    ap.add_argument("--compiler", default="gcc", choices=sorted(COMPILERS))
    ap.add_argument("--arch", default="x86_64", choices=ARCHES)
    ap.add_argument("--preset", choices=sorted(PRESETS),
                    help="a named configuration instead of the tree's .config")
    ap.add_argument("--variant", action="append", type=parse_variant,
                    help="NAME[=none|mail|PATCH] (default: kernel=none)")
    ap.add_argument("--namespace-prefix", default="zsm::bench_", type=namespace)
    ap.add_argument("--set", action="append", default=[], metavar="CONFIG_X=VALUE",
                    help="override one option of the config (e.g. CONFIG_ZSMALLOC_STAT=y)")
    args = ap.parse_args()
    overrides = []
    for item in args.set:
        key, eq, value = item.partition("=")
        if not eq or not re.fullmatch(r"CONFIG_\w+", key):
            ap.error(f"--set {item}: expected CONFIG_X=VALUE")
        overrides.append((key, value))
    try:
        result = build(args.out, args.tree, args.config, args.compiler,
                       args.variant or [("kernel", "none")], args.namespace_prefix, overrides,
                       args.arch, args.preset)
    except build_inputs.InputError as e:
        sys.exit(f"kernel_build: {e}")
    print(f"kernel_build: {result['tree']} ({result['form']['name']}), {result['config']}, "
          f"{' '.join(result['cc'])}: {', '.join(result['objects'].values())}")


if __name__ == "__main__":
    main()
