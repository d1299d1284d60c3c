// SPDX-License-Identifier: Apache-2.0
// A library the recorder's tests load and unload (dlopen, dlclose): a caller
// whose addresses stop being its own.
extern "C" __attribute__((visibility("default"))) int drvshim_unloadable_function(int x) { return x + 1; }
