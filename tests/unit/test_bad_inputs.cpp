// SPDX-License-Identifier: Apache-2.0
// The table of bad inputs: each row is one bad call on the public
// API against the fake driver, the error kind it must raise and words its
// message must hold. Every row runs in its own fixture, whose TearDown checks
// that nothing leaked, the context stack is as it was, and the driver saw no
// misuse (no dangling or null handle); where a row names a driver function,
// that function must not have been called at all (refused before the driver).
// Rows about views of other owners need a libdrvshim that checks views (Debug
// builds, DRVSHIM_CHECK_VIEWS; the ASan lane) and are skipped elsewhere; stream
// views are checked in every build.
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "fixture.hpp"
#include "vadd_ptx.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

constexpr const char* kPtx = drvshim_test::kVaddPtx;

std::span<const std::byte> bytes_of(const std::string& text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

// What a row may use: the driver, device 0's primary context, a scratch
// directory; everything a row creates is destroyed when the row ends.
struct Env {
  Driver& drv;
  ContextRef ctx;
  std::string dir;  // a fresh directory, removed after the row

  Module module() const { return Module::load(ctx, bytes_of(kPtx)); }
  std::string file(const std::string& name, const std::string& content) const {
    const std::string path = dir + "/" + name;
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
};

struct BadInput {
  const char* name;
  ErrorKind kind;
  std::vector<std::string> words;  // in what(); "{dir}" stands for Env::dir
  std::function<void(Env&)> call;
  const char* not_called = nullptr;  // a driver function the row must not reach
  bool needs_view_checks = false;
};

EventRef destroyed_event(Env& env) {
  Event e = Event::create(env.ctx);
  const EventRef view = e.ref();
  e.destroy();
  return view;
}

StreamRef destroyed_stream(Env& env) {
  Stream s = Stream::create(env.ctx);
  const StreamRef view = s.ref();
  s.destroy();
  return view;
}

const LaunchConfig kOneBlock{{1}, {32}, 0, {}, {}};

std::vector<BadInput> rows() {
  const DevicePtr null_ptr = 0;
  return {
      // ---- events: a destroyed owner fails on the empty view, in every build
      {"WaitOnADestroyedEvent",
       ErrorKind::invalid_argument,
       {"StreamRef::wait", "after its Event was destroyed"},
       [](Env& env) { StreamRef::legacy_default(env.ctx).wait(destroyed_event(env)); },
       "cuStreamWaitEvent"},
      {"RecordADestroyedEvent",
       ErrorKind::invalid_argument,
       {"EventRef::record", "after its Event was destroyed"},
       [](Env& env) { destroyed_event(env).record(StreamRef::legacy_default(env.ctx)); },
       "cuEventRecord"},
      {"SynchronizeADestroyedEvent",
       ErrorKind::invalid_argument,
       {"EventRef::synchronize", "after its Event was destroyed"},
       [](Env& env) { destroyed_event(env).synchronize(); },
       "cuEventSynchronize"},
      {"QueryADestroyedEvent",
       ErrorKind::invalid_argument,
       {"EventRef::query", "after its Event was destroyed"},
       [](Env& env) { (void)destroyed_event(env).query(); },
       "cuEventQuery"},
      {"TimeWithADestroyedEvent",
       ErrorKind::invalid_argument,
       {"elapsed", "after its Event was destroyed"},
       [](Env& env) {
         Event start = Event::create(env.ctx);
         start.ref().record(StreamRef::legacy_default(env.ctx));
         (void)elapsed(start.ref(), destroyed_event(env));
       },
       "cuEventElapsedTime"},
      {"ViewOfAMovedFromEvent",
       ErrorKind::invalid_argument,
       {"Event::ref", "empty (moved from or destroyed)"},
       [](Env& env) {
         Event a = Event::create(env.ctx);
         Event b = std::move(a);
         StreamRef::legacy_default(env.ctx).wait(a.ref());  // NOLINT(bugprone-use-after-move): the point
       },
       "cuStreamWaitEvent"},
      {"RecordOnAStreamOfAnotherContext",
       ErrorKind::invalid_argument,
       {"EventRef::record", "belongs to context", "record an event on a stream of its own context"},
       [](Env& env) {
         Context other = env.drv.device(0).create_context();
         Stream s = Stream::create(other.ref());
         Event e = Event::create(env.ctx);
         e.ref().record(s.ref());
       },
       "cuEventRecord"},
      {"TimeEventsOfTwoContexts",
       ErrorKind::invalid_argument,
       {"elapsed", "belongs to context", "same context"},
       [](Env& env) {
         Context other = env.drv.device(0).create_context();
         Event a = Event::create(env.ctx);
         Event b = Event::create(other.ref());
         a.ref().record(StreamRef::legacy_default(env.ctx));
         b.ref().record(StreamRef::legacy_default(other.ref()));
         (void)elapsed(a.ref(), b.ref());
       },
       "cuEventElapsedTime"},
      {"TimeAnUnrecordedEvent",
       ErrorKind::invalid_argument,
       {"elapsed", "was never recorded"},
       [](Env& env) {
         Event a = Event::create(env.ctx);
         Event b = Event::create(env.ctx);
         (void)elapsed(a.ref(), b.ref());
       },
       "cuEventElapsedTime"},
      {"InterprocessEventWithTiming",
       ErrorKind::invalid_argument,
       {"interprocess event must also disable timing"},
       [](Env& env) { (void)Event::create(env.ctx, EventFlags::interprocess); },
       "cuEventCreate"},
      // ---- streams: a view of a destroyed Stream (every build)
      {"SynchronizeADestroyedStream",
       ErrorKind::invalid_argument,
       {"StreamRef::synchronize", "after its Stream was destroyed"},
       [](Env& env) { destroyed_stream(env).synchronize(); },
       "cuStreamSynchronize"},
      {"QueryADestroyedStream",
       ErrorKind::invalid_argument,
       {"StreamRef::query", "after its Stream was destroyed"},
       [](Env& env) { (void)destroyed_stream(env).query(); },
       "cuStreamQuery"},
      {"CopyOnADestroyedStream",
       ErrorKind::invalid_argument,
       {"copy_async", "after its Stream was destroyed"},
       [](Env& env) {
         auto buf = DeviceBuffer::allocate(env.ctx, 64);
         const std::vector<std::uint8_t> host(64);
         copy_async(destroyed_stream(env), buf.as<std::uint8_t>(), std::span<const std::uint8_t>(host));
       },
       "cuMemcpyHtoDAsync"},
      {"FillOnADestroyedStream",
       ErrorKind::invalid_argument,
       {"fill_async", "after its Stream was destroyed"},
       [](Env& env) {
         auto buf = DeviceBuffer::allocate(env.ctx, 64);
         fill_async(destroyed_stream(env), buf.as<std::uint32_t>(), 7u);
       },
       "cuMemsetD32Async"},
      {"LaunchOnADestroyedStream",
       ErrorKind::invalid_argument,
       {"launch", "after its Stream was destroyed"},
       [null_ptr](Env& env) {
         const Kernel k = env.module().kernel("vadd");
         launch(k, LaunchConfig{{1}, {32}, 0, destroyed_stream(env), {}}, null_ptr, null_ptr, null_ptr, 0u);
       },
       "cuLaunchKernel"},
      {"RecordOnADestroyedStream",
       ErrorKind::invalid_argument,
       {"EventRef::record", "after its Stream was destroyed"},
       [](Env& env) {
         Event e = Event::create(env.ctx);
         e.ref().record(destroyed_stream(env));
       },
       "cuEventRecord"},
      {"HostFunctionOnADestroyedStream",
       ErrorKind::invalid_argument,
       {"StreamRef::launch_host_func", "after its Stream was destroyed"},
       [](Env& env) { destroyed_stream(env).launch_host_func([] {}); },
       "cuLaunchHostFunc"},
      {"StreamPriorityOutOfRange",
       ErrorKind::invalid_argument,
       {"priority 7 is outside the device's range"},
       [](Env& env) { (void)Stream::create(env.ctx, StreamFlags::non_blocking, 7); },
       "cuStreamCreateWithPriority"},
      {"EmptyHostCallback",
       ErrorKind::invalid_argument,
       {"the callback is empty"},
       [](Env& env) { StreamRef::legacy_default(env.ctx).launch_host_func({}); },
       "cuLaunchHostFunc"},
      // ---- module files
      {"LoadADirectoryAsAModule",
       ErrorKind::system,
       {"Module::load_file", "\"{dir}\" is a directory, not a module file", "Is a directory"},
       [](Env& env) { (void)Module::load_file(env.ctx, env.dir); },
       "cuModuleLoadDataEx"},
      {"LoadAMissingModuleFile",
       ErrorKind::system,
       {"Module::load_file", "cannot open \"{dir}/missing.ptx\"", "No such file or directory"},
       [](Env& env) { (void)Module::load_file(env.ctx, env.dir + "/missing.ptx"); },
       "cuModuleLoadDataEx"},
      {"LoadADirectoryAsALibrary",
       ErrorKind::system,
       {"Library::load_file", "\"{dir}\" is a directory", "Is a directory"},
       [](Env& env) { (void)Library::load_file(env.drv, env.dir); },
       "cuLibraryLoadData"},
      {"LoadAFileThatIsNoModule",
       ErrorKind::invalid_argument,
       {"Module::load_file", "\"{dir}/notes.txt\" (11 bytes) is neither a CUBIN (ELF), a fatbin nor PTX text"},
       [](Env& env) { (void)Module::load_file(env.ctx, env.file("notes.txt", "hello world")); },
       "cuModuleLoadDataEx"},
      {"LoadAnEmptyFile",
       ErrorKind::invalid_argument,
       {"\"{dir}/empty.cubin\" (0 bytes) is neither"},
       [](Env& env) { (void)Module::load_file(env.ctx, env.file("empty.cubin", "")); },
       "cuModuleLoadDataEx"},
      {"LoadGarbageBytes",
       ErrorKind::invalid_argument,
       {"the 5-byte image is neither a CUBIN"},
       [](Env& env) { (void)Module::load(env.ctx, bytes_of("junk!")); },
       "cuModuleLoadDataEx"},
      // ---- kernels and launches
      {"EmptyGridY",
       ErrorKind::invalid_argument,
       {"kernel vadd: the grid's y dimension is 0 (grid 4x0x1)"},
       [null_ptr](Env& env) {
         launch(env.module().kernel("vadd"), LaunchConfig{{4, 0, 1}, {32}, 0, {}, {}}, null_ptr, null_ptr, null_ptr,
                0u);
       },
       "cuLaunchKernel"},
      {"EmptyBlockZ",
       ErrorKind::invalid_argument,
       {"kernel vadd: the block's z dimension is 0 (block 32x1x0)"},
       [null_ptr](Env& env) {
         launch(env.module().kernel("vadd"), LaunchConfig{{1}, {32, 1, 0}, 0, {}, {}}, null_ptr, null_ptr, null_ptr,
                0u);
       },
       "cuLaunchKernel"},
      {"BlockOverTheKernelsLimit",
       ErrorKind::invalid_argument,
       {"exceeds the kernel's limit of 1024"},
       [null_ptr](Env& env) {
         launch(env.module().kernel("vadd"), LaunchConfig{{1}, {2048}, 0, {}, {}}, null_ptr, null_ptr, null_ptr, 0u);
       },
       "cuLaunchKernel"},
      {"TooFewArguments",
       ErrorKind::invalid_argument,
       {"kernel vadd takes 4 argument(s), 1 given"},
       [null_ptr](Env& env) { launch(env.module().kernel("vadd"), kOneBlock, null_ptr); },
       "cuLaunchKernel"},
      {"AnArgumentOfTheWrongSize",
       ErrorKind::invalid_argument,
       {"argument 4 of 4 has 8 bytes, the kernel expects 4 bytes"},
       [null_ptr](Env& env) {
         launch(env.module().kernel("vadd"), kOneBlock, null_ptr, null_ptr, null_ptr, std::uint64_t{1});
       },
       "cuLaunchKernel"},
      {"AMisspelledKernel",
       ErrorKind::invalid_argument,
       {"no kernel named \"vad\"", "its kernels are: vadd"},
       [](Env& env) { (void)env.module().kernel("vad"); }},
      {"AKernelOfAnUnloadedModule",
       ErrorKind::invalid_argument,
       {"Module::kernel", "empty (moved from or unloaded)"},
       [](Env& env) {
         Module m = env.module();
         m.unload();
         (void)m.kernel("vadd");
       },
       "cuModuleGetFunction"},
      {"AKernelOfAMovedFromLibrary",
       ErrorKind::invalid_argument,
       {"Library::kernel", "empty"},
       [](Env& env) {
         Library a = Library::load(env.drv, bytes_of(kPtx));
         Library b = std::move(a);
         (void)a.kernel(env.ctx, "vadd");  // NOLINT(bugprone-use-after-move): the point
       },
       "cuLibraryGetKernel"},
      {"AGlobalOfTheWrongElementSize",
       ErrorKind::invalid_argument,
       {"global \"counter\" has 4 bytes, not a multiple of the element size 8"},
       [](Env& env) { (void)env.module().global<std::uint64_t>("counter"); }},
      {"AGlobalViewAfterItsModuleWasUnloaded",
       ErrorKind::invalid_argument,
       {"fill", "the module whose global it views was unloaded"},
       [](Env& env) {
         std::optional<DeviceSpan<std::uint32_t>> view;
         {
           Module m = env.module();
           view.emplace(m.global<std::uint32_t>("counter"));
         }
         fill(*view, 1u);
       },
       "cuMemsetD32",
       true},
      // ---- NVRTC
      {"AnUnknownNvrtcOption",
       ErrorKind::cuda,
       {"nvrtcResult 5", "Hint: NVRTC does not know the option --not-an-option: correct or remove it"},
       [](Env&) {
         CompileOptions o;
         o.arch = "compute_90";
         o.extra = {"--not-an-option"};
         (void)load_nvrtc().compile("__global__ void k() {}\n", "k.cu", o);
       }},
      {"ABadValueForAnNvrtcOption",
       ErrorKind::cuda,
       {"Hint: the value given for --gpu-architecture (-arch) is not one NVRTC accepts"},
       [](Env&) {
         CompileOptions o;
         o.arch = "compute_12";
         (void)load_nvrtc().compile("__global__ void k() {}\n", "k.cu", o);
       }},
      {"NoNvrtcArchitecture",
       ErrorKind::invalid_argument,
       {"no target architecture"},
       [](Env&) { (void)load_nvrtc().compile("__global__ void k() {}\n", "k.cu", CompileOptions{}); }},
      // ---- memory and contexts
      {"AZeroByteAllocation",
       ErrorKind::invalid_argument,
       {"an allocation of 0 bytes was requested"},
       [](Env& env) { (void)DeviceBuffer::allocate(env.ctx, 0); },
       "cuMemAlloc"},
      {"ACopyLongerThanItsDestination",
       ErrorKind::invalid_argument,
       {"the source is longer"},
       [](Env& env) {
         auto buf = DeviceBuffer::allocate(env.ctx, 16);
         const std::vector<std::uint8_t> host(64);
         copy(buf.as<std::uint8_t>(), std::span<const std::uint8_t>(host));
       },
       "cuMemcpyHtoD"},
      {"ADeviceViewOfAFreedBuffer",
       ErrorKind::invalid_argument,
       {"copy (host to device)", "after the buffer that owned it was freed"},
       [](Env& env) {
         std::optional<DeviceSpan<std::uint8_t>> view;
         {
           auto buf = DeviceBuffer::allocate(env.ctx, 16);
           view.emplace(buf.as<std::uint8_t>());
         }
         const std::vector<std::uint8_t> host(16);
         copy(*view, std::span<const std::uint8_t>(host));
       },
       "cuMemcpyHtoD",
       true},
      {"AViewOfAReleasedPrimaryContext",
       ErrorKind::invalid_argument,
       {"PrimaryContext::ref", "empty"},
       [](Env& env) {
         PrimaryContext p = env.drv.device(0).retain_primary_context();
         p.release();
         (void)p.ref();
       }},
  };
}

class BadInputs : public PrimaryContextTest, public ::testing::WithParamInterface<BadInput> {
 protected:
  void SetUp() override {
    PrimaryContextTest::SetUp();
    char tmpl[] = "/tmp/drvshim-bad-inputs-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) {
      for (const char* f : {"notes.txt", "empty.cubin"}) (void)unlink((dir_ + "/" + f).c_str());
      (void)rmdir(dir_.c_str());
    }
    PrimaryContextTest::TearDown();
  }
  std::string dir_;
};

std::string with_dir(std::string text, const std::string& dir) {
  for (auto at = text.find("{dir}"); at != std::string::npos; at = text.find("{dir}", at + dir.size())) {
    text.replace(at, 5, dir);
  }
  return text;
}

TEST_P(BadInputs, FailsWithATypedErrorNamingTheProblemAndLeaksNothing) {
  const BadInput& row = GetParam();
  if (row.needs_view_checks && !view_checks_enabled()) {
    GTEST_SKIP() << "this libdrvshim build does not check views (not a Debug build)";
  }
  {
    Env env{*drv_, ctx(), dir_};
    try {
      row.call(env);
      ADD_FAILURE() << row.name << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), row.kind) << e.what();
      for (const auto& w : row.words) {
        EXPECT_NE(std::string(e.what()).find(with_dir(w, dir_)), std::string::npos)
            << "missing \"" << with_dir(w, dir_) << "\" in: " << e.what();
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << row.name << ": not a drvshim error: " << e.what();
    }
  }
  if (row.not_called != nullptr) {
    EXPECT_EQ(drvshim_fake_call_count(row.not_called), 0u) << row.not_called << " was called";
  }
}

INSTANTIATE_TEST_SUITE_P(Table, BadInputs, ::testing::ValuesIn(rows()),
                         [](const ::testing::TestParamInfo<BadInput>& row) { return std::string(row.param.name); });

// ScopedCurrentContext and make_current() agree on a poisoned context: both
// refuse it, before the driver. Before: the guard pushed it.
class PoisonedGuard : public FakeDriverTest {};

TEST_F(PoisonedGuard, AScopedGuardRefusesAPoisonedContextAsMakeCurrentDoes) {
  {
    Driver drv = load_and_init();
    Context c = drv.device(0).create_context();
    Stream s = Stream::create(c.ref());
    drvshim_fake_stream_fail(reinterpret_cast<void*>(s.ref().native()), CUDA_ERROR_ILLEGAL_ADDRESS);
    expect_throw<CudaError>([&] { s.ref().synchronize(); });
    drvshim_fake_clear_call_log();
    const auto guard = expect_throw<ContextPoisonedError>([&] { ScopedCurrentContext g(c.ref()); });
    EXPECT_EQ(guard.api(), "ScopedCurrentContext");
    EXPECT_EQ(guard.code(), 700);
    const auto current = expect_throw<ContextPoisonedError>([&] { c.ref().make_current(); });
    EXPECT_EQ(current.kind(), guard.kind());
    EXPECT_TRUE(fake_calls().empty()) << "refused before the driver";
    EXPECT_EQ(drvshim_fake_ctx_stack_depth(), 0);
  }
  // The poisoned context's stream was leaked on purpose; the fake starts over.
  drvshim_fake_reset();
}

}  // namespace

namespace {

// A stream-ordered buffer that outlives its stream: every build knows the
// stream is gone and frees on the legacy default stream instead of passing the
// destroyed stream's handle (the fake counts that as misuse).
class StreamOrderedBuffer : public PrimaryContextTest {};

TEST_F(StreamOrderedBuffer, OutlivingItsStreamItIsFreedOnTheLegacyStream) {
  std::optional<AsyncDeviceBuffer> buf;
  {
    Stream s = Stream::create(ctx());
    buf.emplace(AsyncDeviceBuffer::allocate(s.ref(), 256));
  }
  buf.reset();
  EXPECT_EQ(drvshim_fake_call_count("cuMemFreeAsync"), 1u);
  EXPECT_EQ(drvshim_fake_misuse_count(), 0u) << drvshim_fake_last_misuse();
}

}  // namespace
