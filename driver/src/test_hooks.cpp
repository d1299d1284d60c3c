#include "test_hooks.hpp"

namespace drvshim::detail::test_hooks {

std::atomic<Hook> g_hook{nullptr};

void set(Hook hook) noexcept { g_hook.store(hook); }

}  // namespace drvshim::detail::test_hooks
