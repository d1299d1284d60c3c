#pragma once
// Contract cases: one table of context situations whose results must be the
// same on the fake driver (tests/unit, CI) and on the real driver (tests/gpu,
// the GPU machine). Where they disagree, the fake is fixed and the case noted
// in docs/contract-cases.md. Each case leaves the device as it found it.
#include <drvshim/drvshim.hpp>

#include <functional>
#include <string>
#include <vector>

namespace drvshim_test {

struct ContractResult {
  std::string name;
  std::string observed;
  std::string expected;
};

inline std::string code_of_failure(const std::function<void()>& f) {
  try {
    f();
    return "ok";
  } catch (const drvshim::Error& e) {
    return std::string(drvshim::ErrorKind::cuda == e.kind() ? e.code_name() : "drvshim-error");
  }
}

inline std::string state_text(const drvshim::PrimaryContextState& s) {
  return std::string(s.active ? "active" : "inactive") + "," + drvshim::to_string(s.flags);
}

inline std::vector<ContractResult> run_contract_cases(const drvshim::Driver& drv) {
  using namespace drvshim;
  std::vector<ContractResult> out;
  const Device dev = drv.device(0);
  auto add = [&](std::string name, std::string observed, std::string expected) {
    out.push_back(ContractResult{std::move(name), std::move(observed), std::move(expected)});
  };

  add("fresh process: primary context inactive, flags sched_auto", state_text(dev.primary_context_state()),
      "inactive,sched_auto");
  add("fresh process: no current context", drv.current_context() == 0 ? "none" : "some", "none");
  {
    PrimaryContext p = dev.retain_primary_context();
    add("retain: active", state_text(dev.primary_context_state()), "active,sched_auto");
    add("retain: not made current", drv.current_context() == 0 ? "none" : "some", "none");
    {
      ScopedCurrentContext guard(p.ref());
      add("scoped guard: current is the primary context",
          drv.current_context() == p.ref().address() ? "primary" : "other", "primary");
    }
    add("after the guard: no current context", drv.current_context() == 0 ? "none" : "some", "none");
    {
      PrimaryContext second = dev.retain_primary_context();
      add("second retain: same context", second.ref().address() == p.ref().address() ? "same" : "different", "same");
      add("second retain: adopted (already active)", second.adopted() ? "adopted" : "activated", "adopted");
    }
    add("one of two retains released: still active", state_text(dev.primary_context_state()), "active,sched_auto");
    add("set other flags while active: refused",
        code_of_failure([&] { dev.set_primary_context_flags(ContextFlags::sched_spin); }), "drvshim-error");
    const MemoryInfo info = p.ref().memory_info();
    add("memory_info total equals cuDeviceTotalMem", info.total == dev.total_memory() ? "equal" : "different",
        "equal");
    add("memory_info free within total", info.free > 0 && info.free <= info.total ? "yes" : "no", "yes");
  }
  add("all retains released: inactive", state_text(dev.primary_context_state()), "inactive,sched_auto");
  {
    dev.set_primary_context_flags(ContextFlags::sched_blocking_sync);
    add("flags set before activation", state_text(dev.primary_context_state()), "inactive,sched_blocking_sync");
    {
      PrimaryContext p = dev.retain_primary_context();
      const auto flags = static_cast<unsigned>(p.ref().flags());
      add("activated context has the blocking-sync bit", (flags & 0x04u) != 0 ? "yes" : "no", "yes");
    }
    // The real driver (580.159.04) drops the flags when the last release deactivates the context.
    add("flags reset by deactivation", state_text(dev.primary_context_state()), "inactive,sched_auto");
    dev.set_primary_context_flags(ContextFlags::sched_auto);
    add("flags reset", state_text(dev.primary_context_state()), "inactive,sched_auto");
  }
  {
    Context c = dev.create_context();
    add("create_context: not left current", drv.current_context() == 0 ? "none" : "some", "none");
    add("create_context: primary unaffected", state_text(dev.primary_context_state()), "inactive,sched_auto");
    add("non-primary memory_info works", code_of_failure([&] { (void)c.ref().memory_info(); }), "ok");
    add("destroy", code_of_failure([&] { c.destroy(); }), "ok");
  }
  return out;
}

}  // namespace drvshim_test
