"""cffi builder for the native core (``cpstore._cpstore_native``).

The C declarations come from ``csrc/cpstore.h`` itself, never from a Python
string: preprocessor lines are dropped except integer ``#define`` constants,
which cffi exposes on ``lib``. The xxHash header comes from the system
(``#define XXH_INLINE_ALL``), so a built wheel has no runtime dependency.

Note: this file shadows PyPA's ``build`` package when run from the project
root; build wheels with ``python -P -m build``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cffi import FFI

ROOT = Path(__file__).resolve().parent
CSRC = ROOT / "csrc"
HEADER = CSRC / "cpstore.h"
SOURCES = [
    "cpstore.c",
    "cp_xxh_avx2.c",
    "cp_xxh_avx512.c",
    "cp_chunk.c",
    "cp_ingest.c",
    "cp_canon.c",
]
MISSING = (
    "cpstore: the xxHash header <xxhash.h> was not found; install libxxhash-dev "
    "(Debian/Ubuntu), xxhash-devel (Fedora) or xxhash (Homebrew), or point "
    "CPSTORE_XXHASH_INCLUDE at the folder that holds xxhash.h"
)
_DEFINE = re.compile(r"#define\s+(CP_\w+)\s+(-?(?:0x[0-9A-Fa-f]+|\d+))\s*(?:/\*.*\*/)?\s*$")


def cdef_source(header: Path = HEADER) -> str:
    """The header with everything cffi's cdef cannot read removed."""
    out = []
    for line in header.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            match = _DEFINE.match(stripped)
            if match and not match.group(1).endswith("_H"):
                name, value = match.groups()
                # cffi's cdef takes only non-negative literal defines.
                out.append(
                    f"#define {name} {value}"
                    if not value.startswith("-")
                    else f"static const int {name};"
                )
            continue
        out.append(line)
    return "\n".join(out)


def xxhash_include() -> list[str]:
    """Include folders that hold xxhash.h, or stop the build with one line."""
    env = os.environ.get("CPSTORE_XXHASH_INCLUDE")
    if env:
        if (Path(env) / "xxhash.h").is_file():
            return [env]
        raise SystemExit(MISSING + f" (CPSTORE_XXHASH_INCLUDE={env} has no xxhash.h)")
    compiler = os.environ.get("CC", "cc").split()[0]
    if shutil.which(compiler) is None:
        raise SystemExit(f"cpstore: no C compiler ({compiler}); install gcc or clang")
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.c"
        probe.write_text("#include <xxhash.h>\nint main(void) { return 0; }\n")
        found = (
            subprocess.run(
                [compiler, "-E", str(probe)], capture_output=True, check=False
            ).returncode
            == 0
        )
    for folder in ("/opt/homebrew/include", "/usr/local/include"):
        if not found and (Path(folder) / "xxhash.h").is_file():
            return [folder]
    if not found:
        raise SystemExit(MISSING)
    return []


ffibuilder = FFI()
ffibuilder.cdef(cdef_source())
ffibuilder.set_source(
    "cpstore._cpstore_native",
    '#include "cpstore.h"',
    sources=[str((CSRC / name).relative_to(ROOT)) for name in SOURCES],
    include_dirs=[str(CSRC.relative_to(ROOT)), *xxhash_include()],
    extra_compile_args=["-O3", "-std=c11", *os.environ.get("CPSTORE_CFLAGS", "").split()],
    extra_link_args=os.environ.get("CPSTORE_LDFLAGS", "").split(),
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
    sys.exit(0)
