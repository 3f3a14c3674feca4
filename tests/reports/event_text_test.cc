// Printable (reports/event_text.h): what docs/limits.md promises for text a trace carries into a
// report (module names, NVTX messages, commands): every control that could drive a terminal or
// reorder the text around it shows as '?', and nothing visible is lost (issue 34 item 13).
#include "reports/event_text.h"

#include <gtest/gtest.h>

#include <string>

namespace fp8audit {
namespace {

using ::fp8audit::reports::Printable;

TEST(Printable, C0AndDeleteShowAsQuestionMarks) {
  EXPECT_EQ(Printable(std::string("a\x1b[31mb\x07\x7f\n", 10)), "a?[31mb???");
  EXPECT_EQ(Printable(std::string("x\0y", 3)), "x?y");
}

TEST(Printable, EveryC1ControlShowsAsOneQuestionMark) {
  for (unsigned c = 0x80; c <= 0x9F; ++c) {
    const std::string text = std::string("a\xc2") + static_cast<char>(c) + "b";
    EXPECT_EQ(Printable(text), "a?b") << "U+00" << std::hex << c;
  }
  EXPECT_EQ(Printable("a\xc2\xa0"
                      "b"),
            "a\xc2\xa0"
            "b");  // U+00A0 is visible: kept
}

TEST(Printable, BidiAndFormatControlsShowAsOneQuestionMark) {
  const char* const controls[] = {
      "\xd8\x9c",      // U+061C ARABIC LETTER MARK
      "\xe2\x80\x8e",  // U+200E LEFT-TO-RIGHT MARK
      "\xe2\x80\x8f",  // U+200F RIGHT-TO-LEFT MARK
      "\xe2\x80\xa8",  // U+2028 LINE SEPARATOR
      "\xe2\x80\xa9",  // U+2029 PARAGRAPH SEPARATOR
      "\xe2\x80\xaa",  // U+202A LEFT-TO-RIGHT EMBEDDING
      "\xe2\x80\xab",  // U+202B
      "\xe2\x80\xac",  // U+202C POP DIRECTIONAL FORMATTING
      "\xe2\x80\xad",  // U+202D
      "\xe2\x80\xae",  // U+202E RIGHT-TO-LEFT OVERRIDE
      "\xe2\x81\xa6",  // U+2066 LEFT-TO-RIGHT ISOLATE
      "\xe2\x81\xa7",  // U+2067
      "\xe2\x81\xa8",  // U+2068
      "\xe2\x81\xa9",  // U+2069 POP DIRECTIONAL ISOLATE
  };
  for (const char* control : controls) {
    EXPECT_EQ(Printable(std::string("gpj") + control + "exe"), "gpj?exe") << control;
  }
  // Neighbours that are visible characters stay as they are.
  for (const char* visible : {"\xe2\x80\x94", "\xe2\x81\xaa", "\xd8\x9d", "\xc3\xa9"}) {
    const std::string text = std::string("a") + visible + "b";
    EXPECT_EQ(Printable(text), text) << visible;
  }
}

}  // namespace
}  // namespace fp8audit
