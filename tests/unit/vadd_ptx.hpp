// SPDX-License-Identifier: Apache-2.0
#pragma once
// The PTX of an empty `vadd(u64, u64, u64, u32)` kernel beside a `counter`
// global: the module the tests load when they need one to exist, not to run.
namespace drvshim_test {

inline constexpr const char* kVaddPtx = R"(
.version 8.0
.target sm_90
.address_size 64
.global .align 4 .u32 counter;
.visible .entry vadd(
    .param .u64 vadd_param_0,
    .param .u64 vadd_param_1,
    .param .u64 vadd_param_2,
    .param .u32 vadd_param_3
)
{
    ret;
}
)";

}  // namespace drvshim_test
