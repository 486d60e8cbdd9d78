// system.cpp: run MLX's compiler commands without deafening the program to
// Ctrl-C.
//
// MLX's CPU backend runs the C++ compiler through the C library's system():
// `g++ --version` once per process, then one build per new fused kernel
// (seconds each). The C library's system() sets SIGINT and SIGQUIT to
// "ignore" for the whole process until the command ends, so a Ctrl-C that
// arrives meanwhile is discarded and the program never hears it. This
// definition lives in the executable, which comes first in the dynamic
// linker's lookup order (cgo.go links with -rdynamic, as for blas.cpp), so
// it takes MLX's calls. It runs the command as system() does (/bin/sh -c,
// waiting for it) but leaves the program's signal handling alone, and puts
// the command in a process group of its own: a terminal's Ctrl-C then
// reaches the program only, which stops at its next step, and a kernel
// build under way finishes (MLX keeps the result for the next run) instead
// of dying half-written.

#include <cerrno>
#include <csignal>
#include <spawn.h>
#include <sys/wait.h>

extern char** environ;

extern "C" int system(const char* command) {
  if (command == nullptr) {
    return 1;  // a shell is available
  }
  posix_spawnattr_t attr;
  if (posix_spawnattr_init(&attr) != 0) {
    return -1;
  }
  // The command starts with default dispositions and nothing blocked,
  // whatever the calling thread had.
  sigset_t defaults, none;
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD}) {
    sigaddset(&defaults, sig);
  }
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
  char sh[] = "sh", c[] = "-c";
  char* argv[] = {sh, c, const_cast<char*>(command), nullptr};
  pid_t pid;
  int err = posix_spawn(&pid, "/bin/sh", nullptr, &attr, argv, environ);
  posix_spawnattr_destroy(&attr);
  if (err != 0) {
    errno = err;
    return -1;
  }
  int status;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return -1;
    }
  }
  return status;
}
