// Tiny test helpers for the MPI test programs (tests/cpp/mpi_*_test.cpp): a failing CHECK prints
// the rank, file, line and condition, then aborts the whole job (so no rank is left waiting).
#pragma once

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace zccl_test {

inline int world_rank() {
  int init = 0, fin = 0, r = -1;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

[[noreturn]] inline void fail(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "[rank %d] CHECK FAILED %s:%d: %s\n", world_rank(), file, line,
               what.c_str());
  std::fflush(stderr);
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Abort(MPI_COMM_WORLD, 3);
  std::abort();
}

}  // namespace zccl_test

#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) ::zccl_test::fail(__FILE__, __LINE__, #cond);       \
  } while (0)

#define CHECK_MSG(cond, msg)                                                          \
  do {                                                                                \
    if (!(cond)) ::zccl_test::fail(__FILE__, __LINE__, std::string(#cond) + ": " + (msg)); \
  } while (0)

// Checks that `expr` throws `Type` whose what() contains `substr` ("" matches anything).
#define CHECK_THROWS(expr, Type, substr)                                                   \
  do {                                                                                     \
    bool caught_ = false;                                                                  \
    try {                                                                                  \
      (void)(expr);                                                                        \
    } catch (const Type& e_) {                                                             \
      caught_ = true;                                                                      \
      if (std::string(e_.what()).find(substr) == std::string::npos) {                      \
        ::zccl_test::fail(__FILE__, __LINE__,                                              \
                          std::string(#expr " threw, but the message lacks '") + (substr) + \
                              "': " + e_.what());                                         \
      }                                                                                    \
    } catch (const std::exception& e_) {                                                   \
      ::zccl_test::fail(__FILE__, __LINE__,                                                \
                        std::string(#expr " threw the wrong type: ") + e_.what());         \
    }                                                                                      \
    if (!caught_) ::zccl_test::fail(__FILE__, __LINE__, #expr " did not throw " #Type);   \
  } while (0)
