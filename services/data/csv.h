// Loads a numeric CSV file (features plus one label column) into tensors
// ready for Dataset::FromTensors.
//
// Ownership: results are returned by value and own their memory.
//
// Thread-safety: reentrant; concurrent calls are safe.
//
// Failure behaviour: every problem is a returned Status; nothing is
// partially loaded. Problems in the contents (and a label_column that does
// not fit them) are reported as "PATH:LINE:COLUMN: ..." (1-based; COLUMN is
// the field number) quoting the offending text; the rest start with "PATH: ". A missing file is
// NOT_FOUND, an unreadable one PERMISSION_DENIED; anything wrong with the
// contents or the options is INVALID_ARGUMENT.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "services/tensor/tensor.h"

namespace tfjob::data {

struct CsvOptions {
  char delimiter = ',';
  bool header = true;         // the first non-blank line names the columns
  int64_t label_column = -1;  // 0-based field index; -1 = last
  bool label_is_int = true;   // int64 labels (classes); otherwise float32 (regression)
};

struct CsvData {
  Tensor features;                        // float32 [n, f]: every column except the label, in file order
  Tensor labels;                          // int64 [n] or float32 [n]
  std::vector<std::string> column_names;  // from the header (quotes removed); empty without one
};

// Accepts \n or \r\n line ends, a missing final newline, a UTF-8 byte-order
// mark, blank lines (skipped), and spaces or tabs around cells. Cells must be
// finite decimal numbers (a leading '+' is allowed); integer labels must be
// written as integers. Quoted cells are not supported, except around header
// names. A file needs at least two columns and one data row.
StatusOr<CsvData> LoadCsv(const std::string& path, const CsvOptions& opts = {});

// A CSV file as text cells, for columns chosen by name or index and for
// string features. Cells may be quoted ("a, b" is one cell; "" inside quotes
// is a quote), so a cell can hold the delimiter; a quoted cell does not span
// lines. The same line ends, byte-order mark, blank lines and trimming as
// LoadCsv; every row must have the header's (or first row's) column count.
struct CsvTable {
  std::string path;
  std::vector<std::string> column_names;       // from the header; empty without one
  std::vector<std::vector<std::string>> rows;  // cells, quotes removed
  std::vector<int64_t> lines;                  // each row's line number, for messages
  int64_t num_columns = 0;
};
StatusOr<CsvTable> ReadCsvTable(const std::string& path, char delimiter, bool header);

// A column by header name, or by 0-based index written as digits.
StatusOr<int64_t> CsvColumn(const CsvTable& t, const std::string& name_or_index);
// Columns `cols` of every row, in that order, as float32 or int64 [rows,
// cols.size()] (cells must be numbers as LoadCsv reads them), or as strings.
StatusOr<Tensor> CsvNumbers(const CsvTable& t, const std::vector<int64_t>& cols, DType dtype);
std::vector<std::string> CsvStrings(const CsvTable& t, const std::vector<int64_t>& cols);

}  // namespace tfjob::data
