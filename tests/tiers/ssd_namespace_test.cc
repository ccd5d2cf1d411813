// The SSD store's namespace table (tiers/internal/ssd_store.h): ids stable
// across reopen, layouts (and their kind) kept, a second layout under a
// known name refused.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/units.h"
#include "support/temp_dir.h"
#include "tiers/internal/ssd_store.h"

namespace kvtier::tiers::internal {
namespace {

class SsdNamespaceTest : public ::testing::Test {
 protected:
  SsdOptions Options() {
    SsdOptions o;
    o.dir = dir_;
    o.capacity_bytes = 64 * kMiB;
    return o;
  }
  std::unique_ptr<SsdStore> Open(const SsdOptions& o) {
    auto s = SsdStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  // The store's namespaces, in id order.
  static std::vector<SsdNamespace> Namespaces(SsdStore& store) {
    std::vector<SsdNamespace> all;
    const Status s = store.ForEachNamespace([&](const SsdNamespace& ns) {
      all.push_back(ns);
      return Status::Ok();
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
    return all;
  }

  kvtier::testing::TempDir root_{::testing::TempDir() + "ssd_namespace_test"};
  std::string dir_ = root_ / "data";
};

TEST_F(SsdNamespaceTest, NamespaceIdsAreStableAcrossReopen) {
  const Layout a{32, 8, 128, DType::kFloat16, 16};
  const Layout b{1, 1, 64, DType::kBFloat16, 16};
  {
    auto store = Open(Options());
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->RegisterNamespace("llama", "", a).value(), 0u);
    EXPECT_EQ(store->RegisterNamespace("llama", "tenant", a).value(), 1u);
    EXPECT_EQ(store->RegisterNamespace("tiny", "", b).value(), 2u);
    EXPECT_EQ(store->RegisterNamespace("llama", "", a).value(), 0u);
    EXPECT_EQ(store->RegisterNamespace("llama", "", b).status().code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(store->RegisterNamespace("bad", "", Layout{}).status().code(),
              StatusCode::kInvalidArgument);
  }
  auto store = Open(Options());
  ASSERT_NE(store, nullptr);
  const std::vector<SsdNamespace> all = Namespaces(*store);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[1].model, "llama");
  EXPECT_EQ(all[1].salt, "tenant");
  EXPECT_EQ(all[2].layout, b);
  EXPECT_EQ(store->RegisterNamespace("tiny", "", b).value(), 2u);
  EXPECT_EQ(store->RegisterNamespace("llama", "tenant", a).value(), 1u);
  EXPECT_EQ(store->RegisterNamespace("new", "", b).value(), 3u);
}

// A latent (MLA) namespace is recorded with its kind (namespace version 2)
// beside K/V ones (still version 1, which kvtierds from before kinds read),
// and comes back as latent: never as the K/V layout of the same numbers.
TEST_F(SsdNamespaceTest, ALatentNamespaceKeepsItsKindAcrossReopen) {
  const Layout kv{2, 1, 576, DType::kBFloat16, 16};
  Layout latent = kv;
  latent.kind = KvKind::kLatent;
  {
    auto store = Open(Options());
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->RegisterNamespace("llama", "", kv).value(), 0u);
    EXPECT_EQ(store->RegisterNamespace("deepseek", "", latent).value(), 1u);
    const auto mismatch = store->RegisterNamespace("deepseek", "", kv);
    EXPECT_EQ(mismatch.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(mismatch.status().message().find("kind=latent"), std::string::npos)
        << mismatch.status().ToString();
  }
  auto store = Open(Options());
  ASSERT_NE(store, nullptr);
  const std::vector<SsdNamespace> all = Namespaces(*store);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].layout, kv);
  EXPECT_EQ(all[0].layout.kind, KvKind::kKeyValue);
  EXPECT_EQ(all[1].model, "deepseek");
  EXPECT_EQ(all[1].layout, latent);
  EXPECT_EQ(store->RegisterNamespace("deepseek", "", latent).value(), 1u);
  EXPECT_EQ(store->RegisterNamespace("llama", "", latent).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store->RegisterNamespace("llama", "", kv).value(), 0u);
}

}  // namespace
}  // namespace kvtier::tiers::internal
