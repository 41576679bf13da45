#include "run/threads.h"

#include <string>

#include "util/failure.h"

// The executorch wheel ships libexecutorch_threadpool.so (x86-64 and arm64) but not its header
// (extension/threadpool/threadpool.h): these are that header's declarations of the three calls used here, as the
// library exports them (`nm -DC libexecutorch_threadpool.so`: ThreadPool::_unsafe_reset_threadpool(unsigned int),
// ThreadPool::get_thread_count() const, get_threadpool()).
namespace executorch::extension::threadpool {
class ThreadPool {
 public:
  size_t get_thread_count() const;
  bool _unsafe_reset_threadpool(uint32_t num_threads);
};
ThreadPool* get_threadpool();
}  // namespace executorch::extension::threadpool

namespace ditskip {

void set_cpu_threads(int64_t threads) {
  if (threads < 1 || threads > 1024)
    refuse("threads " + std::to_string(threads) + ": expected a number of CPU threads from 1 to 1024");
  auto* pool = executorch::extension::threadpool::get_threadpool();
  if (pool == nullptr || !pool->_unsafe_reset_threadpool(uint32_t(threads)))
    runtime_failure("ExecuTorch's thread pool could not be resized to " + std::to_string(threads) + " threads");
}

int64_t cpu_threads() {
  auto* pool = executorch::extension::threadpool::get_threadpool();
  return pool == nullptr ? 1 : int64_t(pool->get_thread_count());
}

}  // namespace ditskip
