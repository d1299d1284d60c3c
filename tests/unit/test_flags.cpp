// SPDX-License-Identifier: Apache-2.0
// The one flags helper (flags.hpp): every typed flag enum gets the same |, &,
// has() and to_string(), from the names it declares once.
#include <gtest/gtest.h>
#include <drvshim/drvshim.hpp>

#include <cuda.h>

using namespace drvshim;

namespace {

template <class E>
constexpr E raw(unsigned bits) {
  return static_cast<E>(bits);
}

TEST(Flags, EveryFlagEnumHasUnionIntersectionAndHas) {
  constexpr auto alloc = HostAllocFlags::portable | HostAllocFlags::write_combined;
  static_assert(has(alloc, HostAllocFlags::portable) && !has(alloc, HostAllocFlags::device_map));
  static_assert((alloc & HostAllocFlags::write_combined) == HostAllocFlags::write_combined);
  static_assert((alloc & HostAllocFlags::device_map) == HostAllocFlags::none);
  constexpr auto reg = HostRegisterFlags::device_map | HostRegisterFlags::read_only;
  static_assert(has(reg, HostRegisterFlags::read_only) && !has(reg, HostRegisterFlags::io_memory));
  static_assert((reg & HostRegisterFlags::device_map) == HostRegisterFlags::device_map);
  constexpr auto event = EventFlags::disable_timing | EventFlags::interprocess;
  static_assert(has(event, EventFlags::interprocess) && !has(event, EventFlags::blocking_sync));
  static_assert((event & EventFlags::blocking_sync) == EventFlags::none);
  constexpr auto ctx = ContextFlags::sched_blocking_sync | ContextFlags::map_host;
  static_assert(has(ctx, ContextFlags::map_host) && !has(ctx, ContextFlags::sched_spin));
  static_assert((ctx & ContextFlags::map_host) == ContextFlags::map_host);
  static_assert(has(StreamFlags::blocking | StreamFlags::non_blocking, StreamFlags::non_blocking));
  static_assert((StreamFlags::non_blocking & StreamFlags::blocking) == StreamFlags::blocking);
  // The values are the driver's.
  static_assert(static_cast<unsigned>(HostAllocFlags::write_combined) == CU_MEMHOSTALLOC_WRITECOMBINED);
  static_assert(static_cast<unsigned>(HostRegisterFlags::read_only) == CU_MEMHOSTREGISTER_READ_ONLY);
  static_assert(static_cast<unsigned>(EventFlags::interprocess) == CU_EVENT_INTERPROCESS);
  static_assert(static_cast<unsigned>(ContextFlags::sync_memops) == CU_CTX_SYNC_MEMOPS);
  static_assert(static_cast<unsigned>(StreamFlags::non_blocking) == CU_STREAM_NON_BLOCKING);
  // The bits each enum knows, for the checks that refuse unknown bits.
  static_assert(known_flag_bits<HostAllocFlags>() == 0x7u);
  static_assert(known_flag_bits<HostRegisterFlags>() == 0xFu);
  static_assert(known_flag_bits<EventFlags>() == 0x7u);
  static_assert(known_flag_bits<ContextFlags>() == 0xFFu);
  static_assert(known_flag_bits<StreamFlags>() == 0x1u);
}

TEST(Flags, ToStringNamesEveryBitTheEmptySetAndUnknownBits) {
  EXPECT_EQ(to_string(HostAllocFlags::none), "none");
  EXPECT_EQ(to_string(HostAllocFlags::portable | HostAllocFlags::device_map), "portable|device_map");
  EXPECT_EQ(to_string(raw<HostAllocFlags>(0x1 | 0x40)), "portable|0x40");
  EXPECT_EQ(to_string(raw<HostAllocFlags>(0x40)), "0x40");
  EXPECT_EQ(to_string(HostRegisterFlags::none), "none");
  EXPECT_EQ(to_string(HostRegisterFlags::portable | HostRegisterFlags::io_memory | HostRegisterFlags::read_only),
            "portable|io_memory|read_only");
  EXPECT_EQ(to_string(EventFlags::blocking_sync | EventFlags::disable_timing), "blocking_sync|disable_timing");
  EXPECT_EQ(to_string(EventFlags::none), "none");
  EXPECT_EQ(to_string(StreamFlags::blocking), "blocking");
  EXPECT_EQ(to_string(StreamFlags::non_blocking), "non_blocking");
  // ContextFlags names its empty scheduling field whatever else is set.
  EXPECT_EQ(to_string(ContextFlags::sched_auto), "sched_auto");
  EXPECT_EQ(to_string(ContextFlags::map_host), "sched_auto|map_host");
  EXPECT_EQ(to_string(ContextFlags::sched_blocking_sync | ContextFlags::map_host), "sched_blocking_sync|map_host");
  EXPECT_EQ(to_string(raw<ContextFlags>(0x100)), "sched_auto|0x100");
  EXPECT_EQ(to_string(raw<ContextFlags>(0x1 | 0x100)), "sched_spin|0x100");
}

}  // namespace
