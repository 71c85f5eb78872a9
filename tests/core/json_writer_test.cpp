// SPDX-License-Identifier: Apache-2.0
#include "ddo/core/json_writer.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "ddo/core/chrome_trace_writer.hpp"
#include "ddo/core/detail/json.hpp"

TEST_SUITE("core") {
  TEST_CASE("json_writer: the three layouts, escaping in one place, exact numbers") {
    ddo::json_writer w;
    w.begin_object(ddo::json_layout::lines)
        .member("name", "a \"b\"\n\x01")
        .member("n", 18446744073709551615ull);
    w.key("spaced")
        .begin_object(ddo::json_layout::spaced)
        .member("x", -3)
        .member("ok", true)
        .end_object();
    w.key("list")
        .begin_array()
        .value(1.5, 2)
        .value(std::nan(""), 1)
        .null()
        .value(0.1234567)
        .end_array();
    w.key("empty").begin_array(ddo::json_layout::lines).end_array();
    w.end_object();
    CHECK(w.str() ==
          "{\n  \"name\": \"a \\\"b\\\"\\n\\u0001\",\n  \"n\": 18446744073709551615,\n"
          "  \"spaced\": {\"x\": -3, \"ok\": true},\n  \"list\": [1.50,null,null,0.123457],\n  "
          "\"empty\": [\n  ]\n}");
    const auto doc = ddo::detail::parse_json(w.str());  // what it writes, the reader reads
    CHECK(doc.find("name")->text() == "a \"b\"\n\x01");
    CHECK(doc.find("n")->as_u64() == 18446744073709551615ull);
  }

  TEST_CASE("json_writer: misuse is a usage_error, not a broken document") {
    ddo::json_writer w;
    w.begin_object();
    CHECK_THROWS_AS(w.value(1), ddo::usage_error);     // a value without a key
    CHECK_THROWS_AS((void)w.str(), ddo::usage_error);  // unfinished
    CHECK_THROWS_AS(w.end_array(), ddo::usage_error);  // not the open container
    w.key("k");
    CHECK_THROWS_AS(w.key("again"), ddo::usage_error);  // a key after a key
    w.value("v").end_object();
    CHECK(w.str() == "{\"k\":\"v\"}");
    CHECK_THROWS_AS(w.value(2), ddo::usage_error);  // a second document
  }

  TEST_CASE("chrome_trace_writer: track names, then one complete event per span") {
    ddo::chrome_trace_writer t;
    t.complete("copy \"x\"", "copy", ddo::trace_track::copy_stream, 1234567.8912, -1.0,
               [](ddo::json_writer& a) { a.member("bytes", 4096); });
    const std::string text = t.finish();
    CHECK(text.back() == '\n');
    const auto doc = ddo::detail::parse_json(text);
    const auto& events = doc.find("traceEvents")->items();
    REQUIRE(events.size() == 5);
    CHECK(events[0].find("args")->find("name")->text() == "host");
    CHECK(events[4].find("name")->text() == "copy \"x\"");
    CHECK(events[4].find("tid")->text() == "2");
    CHECK(events[4].find("ts")->text() == "1234567.891");  // no 6-digit rounding of long traces
    CHECK(events[4].find("dur")->text() == "0.000");
    CHECK(events[4].find("args")->find("bytes")->text() == "4096");
  }
}
