// SPDX-License-Identifier: MIT
// BoxedOptional<T>: std::optional's interface, the value held on the heap, so that a large member
// that few objects have costs the others a pointer.
#pragma once

#include <memory>
#include <optional>
#include <utility>

namespace ckptfs {

// Empty, or one T owned through a pointer. Copies copy the value; moves move the pointer.
// Assigned from a T or a std::optional<T> (nullopt empties it). Not thread-safe to mutate.
template <typename T>
class BoxedOptional {
 public:
  BoxedOptional() noexcept = default;
  BoxedOptional(std::nullopt_t) noexcept {}
  BoxedOptional(const T& value) : value_(std::make_unique<T>(value)) {}
  BoxedOptional(T&& value) : value_(std::make_unique<T>(std::move(value))) {}
  BoxedOptional(const std::optional<T>& value) {
    if (value) value_ = std::make_unique<T>(*value);
  }
  BoxedOptional(std::optional<T>&& value) {
    if (value) value_ = std::make_unique<T>(std::move(*value));
  }
  BoxedOptional(const BoxedOptional& other)
      : value_(other.value_ ? std::make_unique<T>(*other.value_) : nullptr) {}
  BoxedOptional(BoxedOptional&&) noexcept = default;
  BoxedOptional& operator=(const BoxedOptional& other) {
    if (this != &other) value_ = other.value_ ? std::make_unique<T>(*other.value_) : nullptr;
    return *this;
  }
  BoxedOptional& operator=(BoxedOptional&&) noexcept = default;
  ~BoxedOptional() = default;

  bool has_value() const noexcept { return value_ != nullptr; }
  explicit operator bool() const noexcept { return has_value(); }
  // As std::optional's: the value must be there.
  T& operator*() noexcept { return *value_; }
  const T& operator*() const noexcept { return *value_; }
  T* operator->() noexcept { return value_.get(); }
  const T* operator->() const noexcept { return value_.get(); }
  template <typename... Args>
  T& emplace(Args&&... args) {
    value_ = std::make_unique<T>(std::forward<Args>(args)...);
    return *value_;
  }
  void reset() noexcept { value_.reset(); }

 private:
  std::unique_ptr<T> value_;
};

}  // namespace ckptfs
