#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The environment check fails on each kind of violation and passes a clean tree."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tree_check_support import TreeCheck  # noqa: E402

CHECK = sys.argv[1]
TABLE = "// table\ninline constexpr Variable kVariables[] = {\n    {\"DRVSHIM_LOG\", \"a\", \"b\", false, Group::library, \"c\"},\n};\n"
CLEAN = {
    "common/env_table.hpp": TABLE,
    "common/env_table.cpp": "const char* value(const char* n) { return std::getenv(n); }\nextern char** environ;\n",
    "driver/src/seam/log.cpp": 'const char* v = env::value("DRVSHIM_LOG");  // not getenv("X")\n',
    "tests/unit/test_x.cpp": 'const char* v = std::getenv("ANYTHING");\n',
    "tools/bench/bench_x.cpp": 'const char* v = std::getenv("BENCH_ANYTHING");\n',
}


_check = TreeCheck(CHECK, CLEAN)
expect = _check.expect


expect("a clean tree passes", {}, 0)
expect("getenv in the driver", {"driver/src/a.cpp": 'auto v = std::getenv("HOME");\n'}, 1, "driver/src/a.cpp:1: reads")
expect("secure_getenv in the fake", {"tools/fakecuda/f.cpp": 'auto v = ::secure_getenv("X");\n'}, 1, "tools/fakecuda/f.cpp:1:")
expect("getenv in drvshim-trace", {"tools/trace/cli/m.cpp": "x = getenv (name);\n"}, 1, "tools/trace/cli/m.cpp:1:")
expect("environ in the compile cache", {"ptx/src/cache/k.cpp": "for (char** e = environ; *e; ++e) {}\n"}, 1,
       "ptx/src/cache/k.cpp:1: uses environ")
expect("an unknown DRVSHIM_ name", {"runtime_compat/src/r.cpp": 'env::value("DRVSHIM_LGO");\n'}, 1,
       "DRVSHIM_LGO is not in")
expect("a pointer to getenv", {"driver/src/p.cpp": "auto* fp = &::secure_getenv;\n"}, 1, "driver/src/p.cpp:1:")
expect("getenv looked up by name", {"tools/probe/d.cpp": 'void* f = dlsym(RTLD_DEFAULT, "getenv");\n'}, 1,
       "tools/probe/d.cpp:1:")
expect("getenv in a .cxx file", {"recorder/src/r.cxx": "auto v = getenv(\"X\");\n"}, 1, "recorder/src/r.cxx:1:")
expect("getenv named in a message is not a read", {"driver/src/m.cpp": 'puts("call secure_getenv(name) here");\n'}, 0)
expect("a script setting an unknown DRVSHIM_ name", {"tools/gpu/t.sh": "DRVSHIM_SKIP_BENCHES=1 ./prog\n"}, 1,
       "tools/gpu/t.sh:1: DRVSHIM_SKIP_BENCHES is set or read")
expect("a script reading a known one", {"tools/gpu/k.sh": 'if [[ ${DRVSHIM_LOG:-} ]]; then :; fi\n'}, 0)
expect("a Python script's environment", {"tools/bench/b.py": 'os.environ["DRVSHIM_LGO"] = "1"\n'}, 1,
       "DRVSHIM_LGO is set or read")
expect("a CMake test environment", {"tests/CMakeLists.txt": 'set_tests_properties(t PROPERTIES ENVIRONMENT "DRVSHIM_LIBCUD=x")\n'},
       1, "DRVSHIM_LIBCUD is set or read")
expect("a CMake environment list on its own line", {"tests/CMakeLists.txt": 'set(x_env "DRVSHIM_LIBCUDA=x" "DRVSHIM_TYPO=1")\n'},
       1, "DRVSHIM_TYPO is set or read")
expect("set(ENV{...}) in CMake", {"cmake/x.cmake": "set(ENV{DRVSHIM_LGO} 1)\n"}, 1, "DRVSHIM_LGO is set or read")
expect("os.getenv in Python", {"tools/a.py": 'v = os.getenv("DRVSHIM_LGO")\n'}, 1, "DRVSHIM_LGO is set or read")
expect("an environment dict in Python", {"tools/b.py": 'run(env={"DRVSHIM_LGO": "1"})\n'}, 1, "DRVSHIM_LGO")
expect("a CMake option on a script's command line is not an environment variable",
       {"tools/c.sh": "cmake -S . -B b -D DRVSHIM_WARNINGS_AS_ERRORS=OFF\n"}, 0)
expect("a read inside a block comment is not a read",
       {"driver/src/b.cpp": "/* getenv(\"X\")\n environ */ int x;\n"}, 0)
_check.exit()
