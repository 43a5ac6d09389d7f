// SPDX-License-Identifier: MIT
// The names and codes of the container kinds.
#include <ckptfs/model/nesting.hpp>

#include <array>

namespace ckptfs {
namespace {

struct KindNames {
  ContainerKind kind;
  std::string_view name;
  char code;
};

constexpr std::array<KindNames, 7> kinds{{
    {ContainerKind::dict, "dict", 'd'},
    {ContainerKind::ordered_dict, "OrderedDict", 'o'},
    {ContainerKind::list, "list", 'l'},
    {ContainerKind::tuple, "tuple", 't'},
    {ContainerKind::set, "set", 's'},
    {ContainerKind::frozenset, "frozenset", 'f'},
    {ContainerKind::object, "object", 'x'},
}};

}  // namespace

std::string_view container_name(ContainerKind kind) noexcept {
  return kinds[static_cast<std::size_t>(kind)].name;
}

std::optional<ContainerKind> container_from_name(std::string_view name) noexcept {
  for (const KindNames& k : kinds) {
    if (k.name == name) return k.kind;
  }
  return std::nullopt;
}

char container_code(ContainerKind kind) noexcept {
  return kinds[static_cast<std::size_t>(kind)].code;
}

std::optional<ContainerKind> container_from_code(char code) noexcept {
  for (const KindNames& k : kinds) {
    if (k.code == code) return k.kind;
  }
  return std::nullopt;
}

}  // namespace ckptfs
