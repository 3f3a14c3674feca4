// Command-line secrets (fp8audit/redact.h): the values of flags and KEY=VALUE arguments whose names
// look like a secret's are gone from what is recorded; everything else is kept (issue 34 item 8).
#include "fp8audit/redact.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fp8audit {
namespace {

using Args = std::vector<std::string>;

Args Redacted(Args args, const std::vector<std::string>& extra = {}) {
  RedactCommand(&args, extra);
  return args;
}

TEST(Redact, FlagValuesAndKeyValueArgumentsOfSecretNamesAreReplaced) {
  EXPECT_EQ(Redacted({"train.py", "--token", "s3cr3t", "--lr", "0.1"}),
            (Args{"train.py", "--token", kRedacted, "--lr", "0.1"}));
  EXPECT_EQ(Redacted({"train.py", "--hf-token=abc", "--api_key", "k", "-password", "p"}),
            (Args{"train.py", std::string("--hf-token=") + kRedacted, "--api_key", kRedacted,
                  "-password", kRedacted}));
  EXPECT_EQ(Redacted({"env", "WANDB_API_KEY=xyz", "AWS_SECRET_ACCESS_KEY=q", "python"}),
            (Args{"env", std::string("WANDB_API_KEY=") + kRedacted,
                  std::string("AWS_SECRET_ACCESS_KEY=") + kRedacted, "python"}));
}

TEST(Redact, OtherArgumentsAreKept) {
  const Args plain = {
      "torchrun", "--nproc-per-node", "8",           "train.py", "--monkey", "3", "--passes",
      "2",        "--keep=1",         "--tokenizer", "llama",    "x=y"};
  EXPECT_EQ(Redacted(plain), plain);
  // A secret flag followed by another flag has no value to hide; the program name is never one.
  EXPECT_EQ(Redacted({"--token", "--verbose"}), (Args{"--token", "--verbose"}));
  EXPECT_EQ(Redacted({"--token"}), (Args{"--token"}));
}

TEST(Redact, TheUserAddsWordsOrTurnsItOff) {
  bool off = true;
  const std::vector<std::string> words = RedactWords(" Dsn , endpoint", &off);
  EXPECT_FALSE(off);
  EXPECT_EQ(words, (std::vector<std::string>{"dsn", "endpoint"}));
  EXPECT_EQ(Redacted({"app", "--sentry-dsn", "https://x", "--endpoint=h"}, words),
            (Args{"app", "--sentry-dsn", kRedacted, std::string("--endpoint=") + kRedacted}));
  for (const char* setting : {"off", "OFF", "none", "0", "false"}) {
    EXPECT_TRUE(RedactWords(setting, &off).empty());
    EXPECT_TRUE(off) << setting;
  }
  EXPECT_TRUE(RedactWords(nullptr, &off).empty());
  EXPECT_FALSE(off);
}

}  // namespace
}  // namespace fp8audit
