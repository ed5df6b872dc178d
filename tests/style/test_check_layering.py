#!/usr/bin/env python3
"""Tests of check_layering.py on small trees it builds in a temporary folder: a clean tree
passes, and each planted violation fails the check with its file, line and reason.

Usage: test_check_layering.py   (Python 3 standard library only)
"""

import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHECKER = HERE / "check_layering.py"
sys.path.insert(0, str(HERE))
import check_layering  # noqa: E402


def write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")


def clean_tree(root):
    """A miniature loom: three layers that depend downward, with a private header and tests."""
    write(root, "include/loom/core/error.h", "#pragma once\n")
    write(root, "src/core/error.cpp", '#include "loom/core/error.h"\n')
    write(root, "src/core/CMakeLists.txt", "loom_layer(core SOURCES error.cpp)\n")
    write(root, "include/loom/device/sim_allocator.h", """
        #pragma once
        #include "loom/core/error.h"
        namespace loom { class HostAllocations {}; using HostScope = HostAllocations; }
        """)
    write(root, "src/device/device_impls.h", "#pragma once\n")
    write(root, "src/device/sim_device.cpp", """
        #include <vector>
        #include "device_impls.h"
        #include "loom/device/sim_allocator.h"
        void f() { loom::HostScope host; }
        """)
    write(root, "src/device/CMakeLists.txt", """
        loom_layer(device
          SOURCES sim_device.cpp
          DEPS loom_core)  # loom_train in a comment is not a dependency
        loom_use_torch_pch(loom_device)
        target_link_libraries(loom_device PUBLIC loom_torch)
        """)
    write(root, "include/loom/train/trainer.h",
          '#pragma once\n#include "loom/device/sim_allocator.h"\n')
    write(root, "src/train/trainer.cpp", """
        #include "loom/train/trainer.h"

        #include "loom/core/error.h"
        // Comments may mention HostScope, and so may strings:
        const char* kNote = "HostScope";
        /* #include "loom/cli/options.h" in a comment is not an include */
        constexpr unsigned long kBig = 100'000'000;
        """)
    write(root, "src/train/CMakeLists.txt", """
        loom_layer(train
          SOURCES trainer.cpp
          DEPS loom_device loom_core)
        """)
    # Tests are not the subject: they may include any layer and name anything.
    write(root, "tests/core/test_error.cpp", """
        #include "loom/train/trainer.h"
        #include "../../src/device/device_impls.h"
        void t() { loom::HostScope host; }
        """)


class CheckLayeringTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = Path(self.tmp.name)
        clean_tree(self.root)

    def tearDown(self):
        self.tmp.cleanup()

    def run_checker(self, *extra):
        return subprocess.run([sys.executable, str(CHECKER), str(self.root), *extra],
                              capture_output=True, text=True)

    def violations(self):
        return [str(v) for v in check_layering.check(self.root)]

    def test_clean_tree_passes(self):
        result = self.run_checker()
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertEqual(result.stdout.strip(), "layering: clean")

    def test_upward_include_in_source_fails_with_file_and_line(self):
        write(self.root, "src/device/cuda_device.cpp", """
            #include "loom/device/sim_allocator.h"

            #include "loom/train/trainer.h"
            """)
        result = self.run_checker()
        self.assertEqual(result.returncode, 1)
        self.assertIn('src/device/cuda_device.cpp:3: #include "loom/train/trainer.h": layer device '
                      "may not include layer train (DESIGN.md: dependencies point downward)",
                      result.stdout)
        self.assertIn("layering: 1 violation(s)", result.stdout)

    def test_upward_include_in_public_header_fails(self):
        write(self.root, "include/loom/core/error.h",
              "#pragma once\n#include <loom/device/sim_allocator.h>\n")
        self.assertEqual(self.violations(), [
            "include/loom/core/error.h:2: #include <loom/device/sim_allocator.h>: layer core may "
            "not include layer device (DESIGN.md: dependencies point downward)"])

    def test_private_header_of_another_layer_fails_even_downward(self):
        write(self.root, "src/train/low_vram.cpp", """
            #include "loom/train/trainer.h"
            #include "../device/device_impls.h"
            #include "src/device/device_impls.h"
            """)
        found = self.violations()
        self.assertEqual(len(found), 2, found)
        self.assertTrue(found[0].startswith(
            'src/train/low_vram.cpp:2: #include "../device/device_impls.h": layer train may not '
            "include a private header of layer device"), found[0])
        self.assertTrue(found[1].startswith("src/train/low_vram.cpp:3: "), found[1])

    def test_private_header_of_a_higher_layer_is_an_upward_include(self):
        write(self.root, "src/train/run.h", "#pragma once\n")
        write(self.root, "src/device/probe.cpp", '// probe\n#include "../train/run.h"\n')
        self.assertEqual(self.violations(), [
            'src/device/probe.cpp:2: #include "../train/run.h": layer device may not include '
            "layer train (DESIGN.md: dependencies point downward)"])

    def test_public_header_may_not_include_its_private_header(self):
        write(self.root, "include/loom/device/sim_allocator.h",
              '#pragma once\n#include "../../../src/device/device_impls.h"\n')
        found = self.violations()
        self.assertEqual(len(found), 1, found)
        self.assertTrue(found[0].startswith("include/loom/device/sim_allocator.h:2: "), found[0])
        self.assertIn("public header of layer device may not include a private header", found[0])

    def test_unknown_layer_fails(self):
        write(self.root, "src/train/extra.cpp", '#include "loom/plugins/x.h"\n')
        write(self.root, "src/plugins/x.cpp", "\n")
        found = self.violations()
        self.assertIn("src/plugins: folder: 'plugins' is not a known layer (add it to LAYERS in "
                      "tests/style/check_layering.py and to DESIGN.md's layer table)", found)
        self.assertTrue(any(v.startswith('src/train/extra.cpp:1: #include "loom/plugins/x.h": '
                                         "'plugins' is not a known layer") for v in found), found)

    def test_cmake_deps_must_point_downward(self):
        write(self.root, "src/device/CMakeLists.txt", """
            loom_layer(device
              SOURCES sim_device.cpp
              DEPS loom_core loom_train)
            target_link_libraries(loom_device PRIVATE
                                  loom_train)
            """)
        self.assertEqual(self.violations(), [
            "src/device/CMakeLists.txt:1: loom_layer(... loom_train ...): layer device may not "
            "link layer train (DESIGN.md: dependencies point downward)",
            "src/device/CMakeLists.txt:4: target_link_libraries(... loom_train ...): layer "
            "device may not link layer train (DESIGN.md: dependencies point downward)"])

    def test_host_scope_outside_device_fails(self):
        write(self.root, "src/train/cache.cpp", """
            #include "loom/device/sim_allocator.h"
            void g() {
                loom::HostScope host;  // HostScope here is code, not a comment
            }
            """)
        result = self.run_checker()
        self.assertEqual(result.returncode, 1)
        self.assertIn("src/train/cache.cpp:3: names HostScope: only the device layer may name "
                      "HostScope", result.stdout)
        self.assertEqual(self.run_checker("--skip", "host_scope").returncode, 0)

    def test_new_layers_have_their_place(self):
        # doctor: above guard (and so above device and config), below cli only.
        allowed = check_layering.below("doctor")
        self.assertTrue({"core", "io", "device", "config", "guard"} <= allowed)
        self.assertNotIn("train", allowed)
        self.assertEqual(sorted(l for l in check_layering.LAYERS
                                if "doctor" in check_layering.below(l)), ["cli"])
        # dist: above device, below guard and train; report: above store, below cli.
        self.assertEqual(check_layering.below("dist"), {"core", "io", "device"})
        self.assertTrue({"guard", "train"} <= {l for l in check_layering.LAYERS
                                               if "dist" in check_layering.below(l)})
        self.assertNotIn("dist", check_layering.below("config"))
        self.assertIn("store", check_layering.below("report"))
        self.assertEqual(sorted(l for l in check_layering.LAYERS
                                if "report" in check_layering.below(l)), ["cli"])
        # The existing chain.
        chain = ["core", "io", "device", "config", "model", "lora", "data", "guard", "train",
                 "store", "cli"]
        for i, layer in enumerate(chain):
            self.assertTrue(set(chain[:i]) <= check_layering.below(layer), layer)
            self.assertFalse(set(chain[i:]) & check_layering.below(layer), layer)

    def test_doctor_may_include_guard_but_train_may_not_include_doctor(self):
        write(self.root, "include/loom/guard/plan.h", "#pragma once\n")
        write(self.root, "include/loom/doctor/diagnosis.h", """
            #pragma once
            #include "loom/guard/plan.h"
            #include "loom/device/sim_allocator.h"
            """)
        self.assertEqual(self.violations(), [])
        write(self.root, "src/train/report.cpp", '#include "loom/doctor/diagnosis.h"\n')
        self.assertEqual(self.violations(), [
            'src/train/report.cpp:1: #include "loom/doctor/diagnosis.h": layer train may not '
            "include layer doctor (DESIGN.md: dependencies point downward)"])

    def test_model_folders_shared_reach_no_family(self):
        write(self.root, "include/loom/model/family.h", "#pragma once\n")
        write(self.root, "include/loom/model/flux/flux_transformer.h", "#pragma once\n")
        write(self.root, "include/loom/model/nn/attention.h", "#pragma once\n")
        write(self.root, "src/model/nn/dit_ops.h", "#pragma once\n")
        write(self.root, "src/model/flux/flux_family.cpp", """
            #include "loom/model/family.h"
            #include "loom/model/flux/flux_transformer.h"
            #include "loom/model/nn/attention.h"
            #include "nn/dit_ops.h"
            """)
        self.assertEqual(self.violations(), [])
        write(self.root, "src/model/vae/wan_vae.cpp", """
            #include "loom/model/nn/attention.h"
            #include "loom/model/flux/flux_transformer.h"
            #include "loom/model/family.h"
            """)
        found = self.violations()
        self.assertEqual(len(found), 2, found)
        self.assertTrue(found[0].startswith(
            'src/model/vae/wan_vae.cpp:2: #include "loom/model/flux/flux_transformer.h": '
            "model/vae/ is shared and may not include the flux family's folder"), found[0])
        self.assertIn("may not include the family seam", found[1])

    def test_model_folders_family_includes_only_its_bases(self):
        write(self.root, "include/loom/model/flux/flux_transformer.h", "#pragma once\n")
        write(self.root, "src/model/wan/wan_family.cpp",
              '#include "loom/model/flux/flux_transformer.h"\n')
        self.assertEqual(self.violations(), [
            'src/model/wan/wan_family.cpp:1: #include "loom/model/flux/flux_transformer.h": the '
            "wan family may not include the flux family's folder unless it is built on it "
            "(MODEL_FAMILIES['wan'] in tests/style/check_layering.py); share the piece through a "
            "shared folder instead"])
        write(self.root, "src/model/extras/x.cpp", "\n")
        self.assertIn("src/model/extras: folder: 'extras' is neither a shared folder nor a family "
                      "of the model layer (add it to MODEL_SHARED or MODEL_FAMILIES in "
                      "tests/style/check_layering.py)", self.violations())
        self.assertEqual(len(check_layering.check(self.root, skip={"model_folders"})), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
