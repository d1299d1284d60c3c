#pragma once
// Runs a test's body in a forked child: fork-safety tests and anything that
// must not leave state in the test process.
#include <sys/wait.h>
#include <unistd.h>

namespace drvshim_test {

// Runs `child` in a forked process and returns its exit code: what `child`
// returned, 98 when it threw, 128 + the signal when it died (a deadlock ends
// after 20 s as SIGALRM, not as a hung test).
template <class F>
int in_child(F&& child) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(20);
    int code = 99;
    try {
      code = child();
    } catch (...) {
      code = 98;
    }
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace drvshim_test
