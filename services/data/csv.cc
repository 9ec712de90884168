#include "services/data/csv.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string_view>

namespace tfjob::data {
namespace {

// Long lines are cut in messages so one bad row cannot flood a log.
std::string Quote(std::string_view text) {
  constexpr size_t kMax = 80;
  std::string out(1, '\'');
  out.append(text.substr(0, kMax));
  if (text.size() > kMax) out.append("...");
  out.push_back('\'');
  return out;
}

class Located {
 public:
  explicit Located(const std::string& path) : path_(path) {}
  Status Error(int64_t line, int64_t column, const std::string& what) const {
    return InvalidArgument(path_ + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + what);
  }

 private:
  const std::string& path_;
};

StatusOr<std::string> ReadFile(const std::string& path) {
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    int err = errno;
    std::string m = path + ": cannot open file";
    if (err != 0) m += std::string(": ") + std::strerror(err);
    if (err == EACCES || err == EPERM) return Status(Code::kPermissionDenied, m);
    return NotFound(m);
  }
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  bool failed = std::ferror(f) != 0;
  int err = errno;
  std::fclose(f);
  if (failed) return DataLoss(path + ": read error: " + std::strerror(err));
  return text;
}

std::string_view Trim(std::string_view s, char delimiter) {
  auto is_space = [delimiter](char c) { return (c == ' ' || c == '\t') && c != delimiter; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool IsBlank(std::string_view line) {
  for (char c : line) {
    if (c != ' ' && c != '\t') return false;
  }
  return true;
}

// The next line of `rest` that is not blank, without its "\r\n" or "\n";
// `line_no` counts every line, blank ones too. False at the end.
bool NextLine(std::string_view& rest, int64_t& line_no, std::string_view& line) {
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!IsBlank(line)) return true;
  }
  return false;
}

std::vector<std::string_view> Split(std::string_view line, char delimiter) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t pos = line.find(delimiter, start);
    if (pos == std::string_view::npos) {
      out.push_back(Trim(line.substr(start), delimiter));
      return out;
    }
    out.push_back(Trim(line.substr(start, pos - start), delimiter));
    start = pos + 1;
  }
}

// from_chars rejects a leading '+', which spreadsheets sometimes write.
std::string_view StripPlus(std::string_view s) {
  if (s.size() > 1 && s[0] == '+' && s[1] != '-' && s[1] != '+') s.remove_prefix(1);
  return s;
}

std::optional<float> ParseFloat(std::string_view s) {
  s = StripPlus(s);
  float v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<int64_t> ParseInt(std::string_view s) {
  s = StripPlus(s);
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string Unquote(std::string_view s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return std::string(s);
}

}  // namespace

StatusOr<CsvData> LoadCsv(const std::string& path, const CsvOptions& opts) {
  if (opts.delimiter == '\n' || opts.delimiter == '\r' || opts.delimiter == '"') {
    return InvalidArgument(path + ": delimiter " + Quote(std::string_view(&opts.delimiter, 1)) + " is not allowed");
  }
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  Located at(path);
  std::string_view rest = text;
  if (rest.substr(0, 3) == "\xEF\xBB\xBF") rest.remove_prefix(3);

  CsvData out;
  int64_t num_columns = 0;   // known after the header or first row
  int64_t label_index = -1;  // resolved together with num_columns
  std::vector<float> features;
  std::vector<int64_t> int_labels;
  std::vector<float> float_labels;
  int64_t rows = 0;
  int64_t line_no = 0;

  std::string_view line;
  while (NextLine(rest, line_no, line)) {
    std::vector<std::string_view> cells = Split(line, opts.delimiter);
    if (num_columns == 0) {
      num_columns = static_cast<int64_t>(cells.size());
      if (num_columns < 2) {
        return at.Error(line_no, 1, "need at least 2 columns (features and a label), found 1 in " + Quote(line));
      }
      if (opts.label_column == -1) {
        label_index = num_columns - 1;
      } else if (opts.label_column >= 0 && opts.label_column < num_columns) {
        label_index = opts.label_column;
      } else {
        return at.Error(line_no, 1,
                        "label_column " + std::to_string(opts.label_column) + " is outside [0, " +
                            std::to_string(num_columns) + ") for " + Quote(line));
      }
      if (opts.header) {
        for (std::string_view c : cells) out.column_names.push_back(Unquote(c));
        continue;
      }
    }

    if (static_cast<int64_t>(cells.size()) != num_columns) {
      int64_t column = std::min<int64_t>(static_cast<int64_t>(cells.size()), num_columns) + 1;
      return at.Error(line_no, column,
                      "expected " + std::to_string(num_columns) + " columns, found " + std::to_string(cells.size()) +
                          " in " + Quote(line));
    }
    for (int64_t c = 0; c < num_columns; ++c) {
      std::string_view cell = cells[c];
      if (cell.empty()) return at.Error(line_no, c + 1, "empty cell in " + Quote(line));
      if (c == label_index && opts.label_is_int) {
        std::optional<int64_t> v = ParseInt(cell);
        if (!v) return at.Error(line_no, c + 1, "label " + Quote(cell) + " is not an integer");
        int_labels.push_back(*v);
      } else {
        std::optional<float> v = ParseFloat(cell);
        if (!v) return at.Error(line_no, c + 1, Quote(cell) + " is not a finite number");
        (c == label_index ? float_labels : features).push_back(*v);
      }
    }
    ++rows;
  }

  if (num_columns == 0) return at.Error(1, 1, "empty file");
  if (rows == 0) return at.Error(line_no + 1, 1, "no data rows after the header");

  int64_t f = num_columns - 1;
  ASSIGN_OR_RETURN(out.features, Tensor::FromVector({rows, f}, std::move(features)));
  if (opts.label_is_int) {
    ASSIGN_OR_RETURN(out.labels, Tensor::FromVector({rows}, std::move(int_labels)));
  } else {
    ASSIGN_OR_RETURN(out.labels, Tensor::FromVector({rows}, std::move(float_labels)));
  }
  return out;
}

namespace {

// One line's cells, quotes resolved; an error for a quote left open.
StatusOr<std::vector<std::string>> SplitQuoted(std::string_view line, char delimiter, const Located& at,
                                               int64_t line_no) {
  std::vector<std::string> out;
  size_t i = 0;
  while (true) {
    // Leading blanks, then either a quoted cell or a plain one.
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t') && line[i] != delimiter) ++i;
    std::string cell;
    if (i < line.size() && line[i] == '"') {
      const size_t open = i++;
      bool closed = false;
      while (i < line.size()) {
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            cell.push_back('"');
            i += 2;
            continue;
          }
          closed = true;
          ++i;
          break;
        }
        cell.push_back(line[i++]);
      }
      if (!closed) {
        return at.Error(line_no, static_cast<int64_t>(out.size()) + 1,
                        "the quote opened at character " + std::to_string(open + 1) + " is not closed on this line");
      }
      while (i < line.size() && line[i] != delimiter) {
        if (line[i] != ' ' && line[i] != '\t') {
          return at.Error(line_no, static_cast<int64_t>(out.size()) + 1,
                          "text after a closing quote in " + Quote(line));
        }
        ++i;
      }
    } else {
      const size_t end = std::min(line.find(delimiter, i), line.size());
      cell = std::string(Trim(line.substr(i, end - i), delimiter));
      i = end;
    }
    out.push_back(std::move(cell));
    if (i >= line.size()) return out;
    ++i;  // the delimiter
  }
}

}  // namespace

StatusOr<CsvTable> ReadCsvTable(const std::string& path, char delimiter, bool header) {
  if (delimiter == '\n' || delimiter == '\r' || delimiter == '"') {
    return InvalidArgument(path + ": delimiter " + Quote(std::string_view(&delimiter, 1)) + " is not allowed");
  }
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  Located at(path);
  std::string_view rest = text;
  if (rest.substr(0, 3) == "\xEF\xBB\xBF") rest.remove_prefix(3);
  CsvTable t;
  t.path = path;
  int64_t line_no = 0;
  bool first = true;
  std::string_view line;
  while (NextLine(rest, line_no, line)) {
    ASSIGN_OR_RETURN(std::vector<std::string> cells, SplitQuoted(line, delimiter, at, line_no));
    if (first) {
      first = false;
      t.num_columns = static_cast<int64_t>(cells.size());
      if (header) {
        t.column_names = std::move(cells);
        continue;
      }
    }
    if (static_cast<int64_t>(cells.size()) != t.num_columns) {
      int64_t column = std::min<int64_t>(static_cast<int64_t>(cells.size()), t.num_columns) + 1;
      return at.Error(line_no, column,
                      "expected " + std::to_string(t.num_columns) + " columns, found " + std::to_string(cells.size()) +
                          " in " + Quote(line));
    }
    t.rows.push_back(std::move(cells));
    t.lines.push_back(line_no);
  }
  if (t.num_columns == 0) return at.Error(1, 1, "empty file");
  if (t.rows.empty()) return at.Error(line_no + 1, 1, "no data rows after the header");
  return t;
}

StatusOr<int64_t> CsvColumn(const CsvTable& t, const std::string& name) {
  auto it = std::find(t.column_names.begin(), t.column_names.end(), name);
  if (it != t.column_names.end()) return static_cast<int64_t>(it - t.column_names.begin());
  std::optional<int64_t> index = name.empty() || name[0] == '+' ? std::nullopt : ParseInt(name);
  if (index && *index >= 0 && *index < t.num_columns) return *index;
  std::string known;
  for (const auto& n : t.column_names) known += (known.empty() ? "" : ", ") + n;
  return InvalidArgument(t.path + ": no column " + Quote(name) +
                         (known.empty()
                              ? " (no header: name columns by index, 0.." + std::to_string(t.num_columns - 1) + ")"
                              : " (columns: " + known + ")"));
}

StatusOr<Tensor> CsvNumbers(const CsvTable& t, const std::vector<int64_t>& cols, DType dtype) {
  Located at(t.path);
  const int64_t rows = static_cast<int64_t>(t.rows.size()), width = static_cast<int64_t>(cols.size());
  ASSIGN_OR_RETURN(Tensor out, Tensor::Create(dtype, {rows, width}));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < width; ++k) {
      const std::string& cell = t.rows[static_cast<size_t>(r)][static_cast<size_t>(cols[static_cast<size_t>(k)])];
      const int64_t line = t.lines[static_cast<size_t>(r)], column = cols[static_cast<size_t>(k)] + 1;
      if (cell.empty()) return at.Error(line, column, "empty cell");
      if (dtype == DType::kInt64) {
        std::optional<int64_t> v = ParseInt(cell);
        if (!v) return at.Error(line, column, Quote(cell) + " is not an integer");
        out.data<int64_t>()[r * width + k] = *v;
      } else {
        std::optional<float> v = ParseFloat(cell);
        if (!v) return at.Error(line, column, Quote(cell) + " is not a finite number");
        out.data<float>()[r * width + k] = *v;
      }
    }
  }
  return out;
}

std::vector<std::string> CsvStrings(const CsvTable& t, const std::vector<int64_t>& cols) {
  std::vector<std::string> out;
  out.reserve(t.rows.size() * cols.size());
  for (const auto& row : t.rows) {
    for (int64_t c : cols) out.push_back(row[static_cast<size_t>(c)]);
  }
  return out;
}

}  // namespace tfjob::data
