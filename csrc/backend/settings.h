// Every setting of the zccl backend, each defined once, in one table (settings.cpp): its name
// (the field of Python's Options), type, allowed values, environment variable and one line of
// documentation; its default is CallConfig's member initializer, read through the table.
// Derived from the table: the bindings' dict <-> CallConfig conversion and the set of fields
// a CallOverride holds; through _C.settings(), Python's Options (fields, defaults, ZCCL_*
// parsing, docs) and, through check(), every validation message. tests/test_settings.py fails
// when Python or README.md's configuration table disagree with it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace zccl::backend {

struct CallConfig;

enum class SettingType : uint8_t { Real, Int, Bool, Choice };

// A setting's value: a number, a flag, the name of a choice, or none (an optional choice unset).
using SettingValue = std::variant<std::monostate, double, int64_t, bool, std::string>;

// A value a setting does not allow; what() reads "<name> must be ...". wrong_type: a value of
// the wrong kind that Python reports as TypeError (Options always did, for reals and flags).
class SettingError : public std::invalid_argument {
 public:
  SettingError(const std::string& what, bool wrong_type)
      : std::invalid_argument(what), wrong_type_(wrong_type) {}
  bool wrong_type() const { return wrong_type_; }

 private:
  bool wrong_type_;
};

struct Setting {
  Setting(std::string name, std::string env, SettingType type, std::string doc)
      : name(std::move(name)), env(std::move(env)), type(type), doc(std::move(doc)) {}

  std::string name;  // Options field; key of the dicts the bindings convert
  std::string env;   // environment variable read when a group is created without pg_options
  SettingType type;
  std::string doc;   // one line, markdown: README's configuration table and Options' docstring
  // Real: values are finite and >= min. Int: values lie in [min, max] (max in messages only
  // when max_in_message; otherwise it is the limit of the member's type) and are multiples of
  // multiple_of.
  double min = 0.0;
  double max = 0.0;
  bool max_in_message = false;
  int64_t multiple_of = 1;
  std::string note;  // Int: said after the requirement in messages ("0 = OpenMP default")
  std::vector<std::string> choices;  // Choice: the allowed names
  bool none_allowed = false;         // Choice: none (Python None) allowed, meaning "not set"
  SettingValue (*read)(const Setting&, const CallConfig&) = nullptr;
  void (*write)(const Setting&, CallConfig&, const SettingValue&) = nullptr;

  SettingValue default_value() const;
  // What an allowed value is, as messages say it: "must be finite and >= 0".
  std::string requirement() const;
  // `given` as this setting's value (an Int given for a Real becomes a double); throws
  // SettingError when it is not allowed.
  SettingValue checked(const SettingValue& given) const;
  // The error for a value of a kind no setting of this type takes.
  SettingError type_error() const;
};

// The table, in the order of Options' fields.
const std::vector<Setting>& settings();
// nullptr when there is no setting of that name.
const Setting* find_setting(std::string_view name);

}  // namespace zccl::backend
