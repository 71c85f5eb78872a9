// SPDX-License-Identifier: Apache-2.0
#include "ddo/model/safetensors.hpp"
#include "ddo/model/synthetic_model.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "model/model_test_support.hpp"

namespace {

/// Expects load_safetensors(path) to fail with a format_error naming @p file and @p tensor and
/// containing @p fragment.
void expect_format_error(const std::string& path, const std::string& file,
                         const std::string& tensor, const std::string& fragment) {
  try {
    (void)ddo::load_safetensors(path);
    FAIL("no error for ", path);
  } catch (const ddo::format_error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(e.file() == file);
    CHECK(e.tensor() == tensor);
    CHECK(what.find(file) != std::string::npos);
    if (!tensor.empty()) CHECK(what.find("'" + tensor + "'") != std::string::npos);
    CHECK(what.find(fragment) != std::string::npos);
  }
}

void expect_bad_header(const ddo_test::temp_dir& dir, const std::string& header,
                       std::size_t data_bytes, const std::string& tensor,
                       const std::string& fragment) {
  const auto path = dir.file("bad.safetensors");
  ddo_test::write_raw(path,
                      ddo_test::safetensors_bytes(header, ddo_test::random_data(data_bytes, 1)));
  expect_format_error(path, path, tensor, fragment);
}

}  // namespace

TEST_SUITE("model") {
  TEST_CASE("written tensors load back with names, dtypes, shapes, sizes and their bytes") {
    ddo_test::temp_dir dir;
    const auto path = dir.file("model.safetensors");
    const auto a = ddo_test::random_bytes(6 * 4 * 2, 21);
    const auto b = ddo_test::random_bytes(5 * 4, 22);
    const auto c = ddo_test::random_bytes(3, 23);
    const std::vector<ddo::safetensors_tensor_data> tensors = {
        {{"blocks.0.attn.to_q.weight", ddo::dtype::bf16, {6, 4}}, a},
        {{"blocks.0.attn.to_q.bias", ddo::dtype::f32, {5}}, b},
        {{"flags", ddo::dtype::u8, {3}}, c},
    };
    ddo::write_safetensors(path, tensors, {{"format", "pt"}});

    const ddo::file_reader reader(path);
    const auto header = ddo::read_safetensors_header(reader);
    CHECK(header.data_offset % 8 == 0);
    REQUIRE(header.metadata.size() == 1);
    CHECK(header.metadata[0].second == "pt");

    const auto table = ddo::load_safetensors(path);
    REQUIRE(table.size() == 3);
    REQUIRE(table.files().size() == 1);
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const auto index = table.find(tensors[i].spec.name);
      REQUIRE(index);
      const auto& w = table[*index];
      CHECK(w.type == tensors[i].spec.type);
      CHECK(w.shape == tensors[i].spec.shape);
      CHECK(w.bytes == tensors[i].data.size());
      const auto& source = std::get<ddo::file_source>(w.source);
      std::vector<std::byte> back(w.bytes);
      reader.read(source.offset, back);
      CHECK(std::memcmp(back.data(), tensors[i].data.data(), back.size()) == 0);
    }
    CHECK(table[*table.find("blocks.0.attn.to_q.weight")].module_name == "blocks.0.attn.to_q");
    CHECK(table[*table.find("blocks.0.attn.to_q.weight")].kind == ddo::module_kind::linear);
    CHECK(table[*table.find("blocks.0.attn.to_q.bias")].kind == ddo::module_kind::linear);
  }

  TEST_CASE("a header with padding, metadata, empty and scalar tensors is accepted") {
    ddo_test::temp_dir dir;
    const auto path = dir.file("ok.safetensors");
    const std::string header =
        R"({"__metadata__":{"a":"b"},"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
        R"("e":{"dtype":"BF16","shape":[0,7],"data_offsets":[4,4]}}   )";
    ddo_test::write_raw(path, ddo_test::safetensors_bytes(header, ddo_test::random_data(4, 2)));
    const auto table = ddo::load_safetensors(path);
    CHECK(table.size() == 2);
    CHECK(table[*table.find("s")].bytes == 4);
    CHECK(table[*table.find("e")].bytes == 0);
  }

  TEST_CASE("a file shorter than the length field is refused as truncated") {
    ddo_test::temp_dir dir;
    const auto path = dir.file("short.safetensors");
    ddo_test::write_raw(path, "abc");
    expect_format_error(path, path, "", "fewer than the 8-byte header length");
  }

  TEST_CASE("a header length longer than the file is refused") {
    ddo_test::temp_dir dir;
    const auto path = dir.file("long.safetensors");
    ddo_test::write_raw(path, ddo_test::safetensors_bytes("{}", "", 5000));
    expect_format_error(path, path, "", "longer than the 2 bytes that follow");
  }

  TEST_CASE("a huge header length is refused before anything is allocated") {
    ddo_test::temp_dir dir;
    const auto path = dir.file("huge.safetensors");
    ddo_test::write_raw(path, ddo_test::safetensors_bytes("{}", "", 1ull << 62));
    expect_format_error(path, path, "", "exceeds the limit");
    ddo_test::write_raw(path, ddo_test::safetensors_bytes("{}", "", UINT64_MAX - 1));
    expect_format_error(path, path, "", "exceeds the limit");
  }

  TEST_CASE("malformed JSON is refused with the byte offset") {
    ddo_test::temp_dir dir;
    for (const char* bad :
         {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", R"({"a":{"dtype":"F32",}})",
          R"({"a" {}})", R"({"a":[1,2,]})", R"({"a":01})", "{\"a\":\"\x01\"}", R"({"a":"\ud800"})",
          "[1, 2]", R"({"a":1} x)", R"({"a":"\q"})", R"({"a":tru})"})
      expect_bad_header(dir, bad, 4, "", "");
    expect_bad_header(dir, R"({"a":{"dtype":"F32",}})", 4, "", "not valid JSON");
    expect_bad_header(dir, "[1, 2]", 4, "", "must be a JSON object");
  }

  TEST_CASE("deeply nested JSON is refused, not a stack overflow") {
    ddo_test::temp_dir dir;
    std::string deep = "{\"__metadata__\":";
    for (int i = 0; i < 100000; ++i) deep += '[';
    expect_bad_header(dir, deep, 0, "", "nested deeper");
  }

  TEST_CASE("duplicate tensor names in one header are refused") {
    ddo_test::temp_dir dir;
    expect_bad_header(dir,
                      R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                      R"("w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                      2, "w", "duplicate key");
  }

  TEST_CASE("an unknown dtype is refused naming the tensor and the known dtypes") {
    ddo_test::temp_dir dir;
    expect_bad_header(dir, R"({"w":{"dtype":"F12","shape":[2],"data_offsets":[0,4]}})", 4, "w",
                      "unknown dtype 'F12' (known: BOOL");
  }

  TEST_CASE("a byte range that disagrees with shape x dtype is refused") {
    ddo_test::temp_dir dir;
    expect_bad_header(dir, R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 24, "w",
                      "span 20 bytes but shape x dtype (F32) needs 24");
  }

  TEST_CASE("a byte range past the data section is refused as truncated") {
    ddo_test::temp_dir dir;
    expect_bad_header(dir, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 10, "w",
                      "reach past the data section of 10 bytes");
  }

  TEST_CASE("overlapping byte ranges are refused naming both tensors") {
    ddo_test::temp_dir dir;
    expect_bad_header(dir,
                      R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}})",
                      10, "b", "overlaps tensor 'a'");
    // Containment is overlap too, even when the inner range starts at the same offset.
    expect_bad_header(dir,
                      R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
                      10, "b", "overlaps tensor 'a'");
  }

  TEST_CASE("malformed tensor entries are refused naming the tensor") {
    ddo_test::temp_dir dir;
    expect_bad_header(dir, R"({"w":{"dtype":"U8","shape":[1]}})", 1, "w",
                      "missing field 'data_offsets'");
    expect_bad_header(dir, R"({"w":{"shape":[1],"data_offsets":[0,1]}})", 1, "w",
                      "missing field 'dtype'");
    expect_bad_header(dir, R"({"w":{"dtype":"U8","data_offsets":[0,1]}})", 1, "w",
                      "missing field 'shape'");
    expect_bad_header(dir, R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", 1, "w",
                      "non-negative integers");
    expect_bad_header(dir, R"({"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", 1, "w",
                      "non-negative integers");
    expect_bad_header(dir, R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[1,0]}})", 1, "w",
                      "is after end");
    expect_bad_header(dir, R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", 1, "w",
                      "two integers");
    expect_bad_header(dir, R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,1]}})", 1, "w",
                      "dtype must be a string");
    expect_bad_header(dir, R"({"w":[1]})", 1, "w", "must be an object");
    expect_bad_header(
        dir, R"({"w":{"dtype":"U8","shape":[4294967296,4294967296,16],"data_offsets":[0,1]}})", 1,
        "w", "overflows");
    expect_bad_header(dir,
                      R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,99999999999999999999]}})",
                      1, "w", "fit 64 bits");
  }

  TEST_CASE("__metadata__ must be an object of strings") {
    ddo_test::temp_dir dir;
    expect_bad_header(dir, R"({"__metadata__":{"a":1}})", 0, "", "must be a string");
    expect_bad_header(dir, R"({"__metadata__":[]})", 0, "", "must be an object of strings");
  }

  TEST_CASE("a sharded model loads from its index with every tensor from its shard") {
    ddo_test::temp_dir dir;
    const auto a = ddo_test::random_bytes(8, 1);
    const auto b = ddo_test::random_bytes(12, 2);
    const std::vector<ddo::safetensors_tensor_data> shard1 = {
        {{"x.weight", ddo::dtype::u8, {2, 4}}, a}};
    const std::vector<ddo::safetensors_tensor_data> shard2 = {
        {{"y.weight", ddo::dtype::f16, {2, 3}}, b}};
    ddo::write_safetensors(dir.file("m-1.safetensors"), shard1);
    ddo::write_safetensors(dir.file("m-2.safetensors"), shard2);
    const std::vector<std::pair<std::string, std::string>> map = {{"x.weight", "m-1.safetensors"},
                                                                  {"y.weight", "m-2.safetensors"}};
    ddo::write_safetensors_index(dir.file("m.safetensors.index.json"), map, 20);
    const auto table = ddo::load_safetensors(dir.file("m.safetensors.index.json"));
    REQUIRE(table.size() == 2);
    CHECK(table.files().size() == 2);
    const auto& y = table[*table.find("y.weight")];
    CHECK(table.files()[std::get<ddo::file_source>(y.source).file_index] ==
          dir.file("m-2.safetensors"));
  }

  TEST_CASE("an index that disagrees with its shards is refused naming file and tensor") {
    ddo_test::temp_dir dir;
    const auto a = ddo_test::random_bytes(4, 1);
    const std::vector<ddo::safetensors_tensor_data> shard = {
        {{"x.weight", ddo::dtype::u8, {4}}, a}};
    ddo::write_safetensors(dir.file("s.safetensors"), shard);
    const auto index = dir.file("m.safetensors.index.json");

    ddo_test::write_raw(
        index, R"({"weight_map":{"x.weight":"s.safetensors","z.weight":"s.safetensors"}})");
    expect_format_error(index, dir.file("s.safetensors"), "z.weight", "missing from its shard");

    ddo_test::write_raw(index, R"({"weight_map":{"q":"s.safetensors"}})");
    expect_format_error(index, dir.file("s.safetensors"), "x.weight", "not listed in the index");

    ddo_test::write_raw(index, R"({"weight_map":{"x.weight":"/etc/passwd"}})");
    expect_format_error(index, index, "x.weight", "relative to the index's directory");
    ddo_test::write_raw(index, R"({"weight_map":{"x.weight":"../s.safetensors"}})");
    expect_format_error(index, index, "x.weight", "relative to the index's directory");

    ddo_test::write_raw(index, R"({"weight_map": [)");
    expect_format_error(index, index, "", "index is not valid JSON");
    ddo_test::write_raw(index, R"({"metadata":{}})");
    expect_format_error(index, index, "", "\"weight_map\" object");
  }

  TEST_CASE("the same tensor in two files of one model is refused") {
    ddo_test::temp_dir dir;
    const auto a = ddo_test::random_bytes(4, 1);
    const std::vector<ddo::safetensors_tensor_data> t = {{{"x.weight", ddo::dtype::u8, {4}}, a}};
    ddo::write_safetensors(dir.file("a.safetensors"), t);
    ddo::write_safetensors(dir.file("b.safetensors"), t);
    const std::vector<std::string> paths = {dir.file("a.safetensors"), dir.file("b.safetensors")};
    try {
      (void)ddo::load_safetensors(paths);
      FAIL("no error");
    } catch (const ddo::format_error& e) {
      CHECK(e.file() == dir.file("b.safetensors"));
      CHECK(e.tensor() == "x.weight");
    }
  }

  TEST_CASE("parse_safetensors_header never crashes on arbitrary bytes") {
    // A small in-suite stand-in for the fuzzer: random mutations of a valid header either parse
    // or throw format_error.
    const std::string valid =
        R"({"__metadata__":{"k":"v"},"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},)"
        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
    std::mt19937_64 rng(99);
    int parsed = 0;
    for (int round = 0; round < 3000; ++round) {
      std::string s = valid;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits; ++e) {
        const std::size_t at = rng() % s.size();
        switch (rng() % 3) {
          case 0:
            s[at] = static_cast<char>(rng() % 256);
            break;
          case 1:
            s.erase(at, 1 + rng() % 3);
            break;
          default:
            s.insert(at, 1, "{}[]\",:0123456789-e."[rng() % 20]);
            break;
        }
        if (s.empty()) s = "{";
      }
      try {
        (void)ddo::parse_safetensors_header(s, 12, "fuzz");
        ++parsed;
      } catch (const ddo::format_error& e) {
        CHECK(e.file() == "fuzz");
      }
    }
    CHECK(parsed < 3000);
  }

  TEST_CASE("the writer refuses duplicate names and a wrong number of data bytes") {
    ddo_test::temp_dir dir;
    CHECK_THROWS_AS(
        ddo::safetensors_writer(dir.file("d.safetensors"),
                                {{"a", ddo::dtype::u8, {1}}, {"a", ddo::dtype::u8, {1}}}),
        ddo::usage_error);
    ddo::safetensors_writer w(dir.file("w.safetensors"), {{"a", ddo::dtype::f32, {2}}});
    const auto bytes = ddo_test::random_bytes(4, 3);
    w.write(bytes);
    CHECK_THROWS_AS(w.finish(), ddo::usage_error);
    w.write(bytes);
    CHECK_THROWS_AS(w.write(bytes), ddo::usage_error);
    w.finish();
    CHECK(ddo::load_safetensors(dir.file("w.safetensors")).size() == 1);
  }

  TEST_CASE("strictness: tensors must tile the data area exactly, as the reference requires") {
    ddo_test::temp_dir dir;
    // A gap between two tensors.
    expect_bad_header(dir,
                      R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                      R"("b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}})",
                      10, "b", "gap of 2 bytes after tensor 'a'");
    // A gap at the start.
    expect_bad_header(dir, R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 6, "a",
                      "gap of 2 bytes after the start of the data area");
    // Trailing bytes after the last tensor (and a header with no tensors but data).
    expect_bad_header(dir, R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 7, "",
                      "3 trailing bytes");
    expect_bad_header(dir, R"({"__metadata__":{"k":"v"}})", 5, "", "5 trailing bytes");
    // The reference ignores fields it does not know; so does ddo.
    const auto path = dir.file("extra.safetensors");
    ddo_test::write_raw(
        path, ddo_test::safetensors_bytes(
                  R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"x":{"y":[1]}}})",
                  ddo_test::random_data(2, 4)));
    CHECK(ddo::load_safetensors(path).size() == 1);
    // Zero-sized tensors anywhere in the order tile too.
    const auto zero = dir.file("zero.safetensors");
    ddo_test::write_raw(
        zero, ddo_test::safetensors_bytes(
                  R"({"z":{"dtype":"F32","shape":[0],"data_offsets":[2,2]},)"
                  R"("a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                  R"("b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}})",
                  ddo_test::random_data(3, 5)));
    CHECK(ddo::load_safetensors(zero).size() == 3);
  }

  TEST_CASE("a header that is not UTF-8 is refused; bad bytes in names are shown as \\xHH") {
    ddo_test::temp_dir dir;
    expect_bad_header(dir, "{\"w\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                      "", "not valid UTF-8 (invalid byte at header byte 3)");
    // A valid UTF-8 name with control characters is accepted; messages escape them.
    const auto path = dir.file("ctl.safetensors");
    ddo_test::write_raw(path, ddo_test::safetensors_bytes(
                                  R"({"w\u0007\n":{"dtype":"U8","shape":[1],"data_offsets":[0,9]}})",
                                  ddo_test::random_data(9, 6)));
    try {
      (void)ddo::load_safetensors(path);
      FAIL("no error");
    } catch (const ddo::format_error& e) {
      const std::string what = e.what();
      CHECK(what.find("w\\x07\\x0a") != std::string::npos);
      CHECK(what.find('\a') == std::string::npos);
      CHECK(what.find('\n') == std::string::npos);
    }
  }

  TEST_CASE("ddo's writer and the synthetic model pass the strict reader") {
    ddo_test::temp_dir dir;
    ddo::synthetic_model_options o;
    o.blocks = 2;
    o.hidden = 64;
    o.output = dir.file("syn.safetensors");
    (void)ddo::write_synthetic_model(o);
    CHECK(ddo::load_safetensors(o.output).size() > 10);
    o.shards = 3;
    o.output = dir.file("syn.safetensors.index.json");
    (void)ddo::write_synthetic_model(o);
    CHECK(ddo::load_safetensors(o.output).size() > 10);
  }
}
