#include "test_hooks.hpp"

namespace drvshim::detail::test_hooks {

std::atomic<Hook> g_hook{nullptr};
std::atomic<unsigned> g_usable_cpus{0};

void set(Hook hook) noexcept { g_hook.store(hook); }

}  // namespace drvshim::detail::test_hooks
