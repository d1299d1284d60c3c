// SPDX-License-Identifier: Apache-2.0
#pragma once
// A process-wide object whose lock is held across fork(), for the registries
// that a child may reach (it may load a Driver of its own, destroy an object
// it inherited): the child never inherits the lock held by a thread that does
// not exist there.
#include <pthread.h>

namespace drvshim::detail {

// The one T of the process (made at the first call, never destroyed: owners
// may use it during exit). T has a member `mutex`, locked before fork() and
// unlocked after it in the parent and in the child.
template <class T>
T& fork_guarded() {
  static T* const instance = [] {
    auto* made = new T;
    pthread_atfork([] { fork_guarded<T>().mutex.lock(); }, [] { fork_guarded<T>().mutex.unlock(); },
                   [] { fork_guarded<T>().mutex.unlock(); });
    return made;
  }();
  return *instance;
}

}  // namespace drvshim::detail
