// Boost.Asio with C++20 coroutines, as the daemon uses it.
#pragma once

// clang-format off
// Boost 1.74's awaitable.hpp uses std::exchange without including <utility>.
#include <utility>
#include <boost/asio.hpp>
// clang-format on

namespace kvtier::daemon {
namespace asio = boost::asio;
}  // namespace kvtier::daemon
