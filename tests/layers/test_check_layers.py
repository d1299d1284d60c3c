#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The layer check's own tests: it passes a tree that keeps the layers and
fails, naming file, line and rule, on each kind of wrong include.

Usage: tests/layers/test_check_layers.py CHECK_SCRIPT   (ctest: layer_check_self_test)
"""
import os
import subprocess
import sys
import tempfile
import unittest

CHECK = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else
                        os.path.join(os.path.dirname(__file__), "..", "..", "tools", "dev", "check_layers.py"))

# A tree that keeps the layers: the shape of drvshim's, a few files each.
CLEAN = {
    "driver/include/drvshim/log.hpp": "#pragma once\n",
    "driver/include/drvshim/device.hpp": "#pragma once\n#include <drvshim/log.hpp>\n#include <vector>\n",
    "common/log_internal.hpp": "#pragma once\n#include <drvshim/log.hpp>\n#include <fmt/format.h>\n",
    "common/cu_errors.inc": "// table\n",
    "recorder/include/drvshim_recorder/recorder.hpp": "#pragma once\n",
    "recorder/src/state.hpp": "#pragma once\n#include <drvshim_recorder/recorder.hpp>\n",
    "recorder/src/result_names.cpp": '#include "cu_errors.inc"\n#include "state.hpp"\n',
    "driver/src/core.hpp": "#pragma once\n#include <drvshim/device.hpp>\n",
    "driver/src/device.cpp": '#include <drvshim/device.hpp>\n#include "core.hpp"\n#include "log_internal.hpp"\n',
    "ptx/include/drvshim/nvrtc.hpp": "#pragma once\n#include <drvshim/device.hpp>\n",
    "ptx/include/drvshim/drvshim.hpp": "#pragma once\n#include <drvshim/device.hpp>\n#include <drvshim/nvrtc.hpp>\n",
    "ptx/src/sha256.hpp": "#pragma once\n",
    "ptx/src/nvrtc.cpp": '#include <drvshim/nvrtc.hpp>\n#include "log_internal.hpp"\n#include "sha256.hpp"\n',
    "runtime_compat/include/drvshim/runtime_compat.hpp": "#pragma once\n#include <drvshim/drvshim.hpp>\n",
    "runtime_compat/src/state.hpp": "#pragma once\n#include <drvshim/drvshim.hpp>\n",
    "runtime_compat/src/state.cpp": '#include "state.hpp"\n#include "log_internal.hpp"\n',
    "tools/bench/bench_cache_key.cpp": '#include "sha256.hpp"\n',
    "tools/probe/main.cpp": "#include <drvshim/drvshim.hpp>\n#include <drvshim/runtime_compat.hpp>\n",
    "examples/init_order/main.cpp": "#include <drvshim/drvshim.hpp>\n",
    # Tests may include anything: never scanned.
    "tests/unit/test_core.cpp": '#include "core.hpp"\n#include "sha256.hpp"\n',
}


def run_check(files):
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as fh:
                fh.write(text)
        done = subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True)
        return done.returncode, done.stdout


def with_file(rel, text):
    files = dict(CLEAN)
    files[rel] = text
    return files


class LayerCheck(unittest.TestCase):
    def assert_violation(self, files, *expected):
        rc, out = run_check(files)
        self.assertEqual(rc, 1, out)
        self.assertIn("layer check: 1 violation(s)", out)
        for text in expected:
            self.assertIn(text, out)

    def test_a_tree_that_keeps_the_layers_passes(self):
        rc, out = run_check(CLEAN)
        self.assertEqual(rc, 0, out)
        self.assertEqual(out.strip(), "layer check: 0 violation(s)")

    def test_ptx_including_a_driver_private_header_fails(self):
        self.assert_violation(
            with_file("ptx/src/driver_bridge.cpp", '#include <drvshim/device.hpp>\n\n#include "core.hpp"\n'),
            "ptx/src/driver_bridge.cpp:3: ptx includes core.hpp, private to driver (driver/src/core.hpp)")

    def test_driver_public_header_including_ptx_fails(self):
        self.assert_violation(
            with_file("driver/include/drvshim/drvshim.hpp", "#pragma once\n#include <drvshim/nvrtc.hpp>\n"),
            "driver/include/drvshim/drvshim.hpp:2: driver includes drvshim/nvrtc.hpp of the higher layer ptx")

    def test_driver_source_including_a_runtime_compat_header_fails(self):
        self.assert_violation(
            with_file("driver/src/context.cpp", '#include <drvshim/runtime_compat.hpp>\n'),
            "driver/src/context.cpp:1: driver includes drvshim/runtime_compat.hpp of the higher layer runtime_compat")

    def test_internal_including_a_driver_private_header_fails(self):
        self.assert_violation(
            with_file("common/env.cpp", '#include "log_internal.hpp"\n#include "core.hpp"\n'),
            "common/env.cpp:2: internal includes core.hpp, private to driver")

    def test_runtime_compat_including_a_ptx_private_header_fails(self):
        self.assert_violation(
            with_file("runtime_compat/src/memory.cpp", '#include "state.hpp"\n#include "sha256.hpp"\n'),
            "runtime_compat/src/memory.cpp:2: runtime_compat includes sha256.hpp, private to ptx")

    def test_a_public_header_including_an_internal_one_fails(self):
        self.assert_violation(
            with_file("ptx/include/drvshim/nvrtc.hpp", '#pragma once\n#include "log_internal.hpp"\n'),
            "ptx/include/drvshim/nvrtc.hpp:2: public header includes log_internal.hpp, which is not public")

    def test_a_tool_including_a_private_header_fails(self):
        self.assert_violation(
            with_file("tools/probe/main.cpp", '#include <drvshim/drvshim.hpp>\n#include "core.hpp"\n'),
            "tools/probe/main.cpp:2: tools includes core.hpp, private to driver")

    def test_a_benchmark_of_an_internal_reaches_only_the_headers_named_for_it(self):
        self.assert_violation(
            with_file("tools/bench/bench_cache_key.cpp", '#include "sha256.hpp"\n#include "core.hpp"\n'),
            "tools/bench/bench_cache_key.cpp:2: tools includes core.hpp, private to driver")
        self.assert_violation(
            with_file("tools/bench/bench_other.cpp", '#include "sha256.hpp"\n'),
            "tools/bench/bench_other.cpp:1: tools includes sha256.hpp, private to ptx")

    def test_a_private_header_name_in_two_layers_resolves_to_the_includers_own(self):
        # runtime_compat/src/state.hpp and recorder/src/state.hpp: each layer's own
        # "state.hpp" is fine (CLEAN), another layer's is not.
        self.assert_violation(
            with_file("ptx/src/cache.cpp", '#include "state.hpp"\n'),
            "ptx/src/cache.cpp:1: ptx includes state.hpp")

    def test_the_recorders_private_headers_are_its_own(self):
        self.assert_violation(
            with_file("driver/src/trace.cpp", '#include <drvshim_recorder/recorder.hpp>\n#include "state.hpp"\n'),
            "driver/src/trace.cpp:2: driver includes state.hpp, private to recorder (recorder/src/state.hpp)")

    def test_every_violation_is_reported(self):
        files = dict(CLEAN)
        files["ptx/src/a.cpp"] = '#include "core.hpp"\n'
        files["ptx/src/b.cpp"] = '#include <drvshim/runtime_compat.hpp>\n'
        rc, out = run_check(files)
        self.assertEqual(rc, 1, out)
        self.assertIn("layer check: 2 violation(s)", out)
        self.assertIn("ptx/src/a.cpp:1:", out)
        self.assertIn("ptx/src/b.cpp:1:", out)

    def test_a_folder_whose_name_starts_with_gen_is_still_checked(self):
        self.assert_violation(
            with_file("ptx/src/generic/bridge.cpp", '#include "core.hpp"\n'),
            "ptx/src/generic/bridge.cpp:1: ptx includes core.hpp, private to driver")

    def test_every_c_and_cpp_extension_is_checked(self):
        self.assert_violation(
            with_file("ptx/src/bridge.cc", '#include "core.hpp"\n'),
            "ptx/src/bridge.cc:1: ptx includes core.hpp, private to driver")

    def test_an_include_through_a_macro_is_refused(self):
        self.assert_violation(
            with_file("ptx/src/bridge.cpp", '#define P "../../driver/src/core.hpp"\n#include P\n'),
            "ptx/src/bridge.cpp:2: an include whose path the layer check cannot read")

    def test_include_next_is_refused(self):
        self.assert_violation(
            with_file("ptx/src/bridge.cpp", '#include_next <core.hpp>\n'),
            "ptx/src/bridge.cpp:1: an include whose path the layer check cannot read")


if __name__ == "__main__":
    unittest.main(verbosity=2)
