// Tests of TF_CONFIG parsing and validation, of the environment reader and of
// the check of both against the communicator. The TF behaviour checked here is
// the one of tfconfig_cluster_resolver_test.py and multi_worker_util_test.py.
#include "distribute/cluster_resolver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "distribute/errors.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

using ::distribute::testing::message_of;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The message of the InvalidArgumentError parse_tf_config(json) raises.
std::string parse_error(const std::string& json) {
  return message_of<InvalidArgumentError>([&] { parse_tf_config(json); });
}

// ---------------------------------------------------------------------------
// parse_tf_config: valid configurations

constexpr const char* kChiefAndTwoWorkers = R"({"cluster": {"chief": ["c0:2222"], "worker": ["w0:2222", "w1:2222"]},
  "task": {"type": "%TYPE%", "index": %INDEX%}})";

std::string chief_and_two_workers(const std::string& type, int index) {
  std::string json = kChiefAndTwoWorkers;
  json.replace(json.find("%TYPE%"), 6, type);
  json.replace(json.find("%INDEX%"), 7, std::to_string(index));
  return json;
}

struct Placement {
  const char* type;
  int index;
  int id_in_cluster;
  bool is_chief;
};

std::ostream& operator<<(std::ostream& os, const Placement& p) { return os << p.type << " " << p.index; }

class ChiefAndWorkers : public ::testing::TestWithParam<Placement> {};

TEST_P(ChiefAndWorkers, ChiefIsZeroAndWorkersFollow) {
  const Placement& p = GetParam();
  const TFConfigClusterResolver r = parse_tf_config(chief_and_two_workers(p.type, p.index));
  EXPECT_TRUE(r.in_multi_worker_mode());
  EXPECT_EQ(r.task_type(), p.type);
  EXPECT_EQ(r.task_id(), p.index);
  EXPECT_EQ(r.num_workers(), 3);
  EXPECT_EQ(r.id_in_cluster(), p.id_in_cluster);
  EXPECT_EQ(r.is_chief(), p.is_chief);
  EXPECT_EQ(r.collective_leader(), "/job:chief/replica:0/task:0");
  const ClusterSpec expected{{{"chief", {"c0:2222"}}, {"worker", {"w0:2222", "w1:2222"}}}};
  EXPECT_EQ(r.cluster_spec(), expected);
}

INSTANTIATE_TEST_SUITE_P(Tasks, ChiefAndWorkers,
                         ::testing::Values(Placement{"chief", 0, 0, true}, Placement{"worker", 0, 1, false},
                                           Placement{"worker", 1, 2, false}));

class WorkersOnly : public ::testing::TestWithParam<int> {};

TEST_P(WorkersOnly, WorkerZeroIsChief) {
  const int index = GetParam();
  const TFConfigClusterResolver r = parse_tf_config(R"({"cluster": {"worker": ["a:1", "b:1", "c:1"]},
    "task": {"type": "worker", "index": )" + std::to_string(index) +
                                                    "}}");
  EXPECT_EQ(r.num_workers(), 3);
  EXPECT_EQ(r.id_in_cluster(), index);
  EXPECT_EQ(r.is_chief(), index == 0);
  EXPECT_EQ(r.collective_leader(), "/job:worker/replica:0/task:0");
}

INSTANTIATE_TEST_SUITE_P(Indices, WorkersOnly, ::testing::Values(0, 1, 2));

TEST(ParseTfConfig, EvaluatorIsAChiefOfItsOwnCluster) {
  const TFConfigClusterResolver r = parse_tf_config(
      R"({"cluster": {"chief": ["c:1"], "worker": ["w0:1", "w1:1"], "evaluator": ["e:1"]},
          "task": {"type": "evaluator", "index": 0}})");
  EXPECT_EQ(r.task_type(), "evaluator");
  EXPECT_TRUE(r.is_chief());
  EXPECT_EQ(r.num_workers(), 1);
  EXPECT_EQ(r.id_in_cluster(), 0);
  EXPECT_EQ(r.collective_leader(), "");
}

TEST(ParseTfConfig, EvaluatorDoesNotChangeTheWorkersCount) {
  const TFConfigClusterResolver r = parse_tf_config(
      R"({"cluster": {"worker": ["w0:1", "w1:1"], "evaluator": ["e:1"]}, "task": {"type": "worker", "index": 1}})");
  EXPECT_EQ(r.num_workers(), 2);
  EXPECT_EQ(r.id_in_cluster(), 1);
  EXPECT_FALSE(r.is_chief());
}

TEST(ParseTfConfig, PsTaskIsReadButIsNotAWorker) {
  const TFConfigClusterResolver r = parse_tf_config(R"({
    "cluster": {"ps": ["ps0:2222", "ps1:2222"], "worker": ["worker0:2222", "worker1:2222", "worker2:2222"]},
    "rpc_layer": "grpc", "session_master": "ignored:1", "task": {"type": "ps", "index": 1}})");
  EXPECT_EQ(r.task_type(), "ps");
  EXPECT_EQ(r.task_id(), 1);
  EXPECT_EQ(r.rpc_layer(), "grpc");
  EXPECT_FALSE(r.is_chief());
  EXPECT_EQ(r.cluster_spec().num_tasks("ps"), 2);
  EXPECT_EQ(r.cluster_spec().jobs.at("worker"),
            (std::vector<std::string>{"worker0:2222", "worker1:2222", "worker2:2222"}));
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { (void)r.num_workers(); }), HasSubstr("\"ps\""));
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { (void)r.id_in_cluster(); }), HasSubstr("\"ps\""));
}

TEST(ParseTfConfig, TaskIndexStringIsCastToInteger) {
  // TF applies int() to "index".
  const TFConfigClusterResolver r =
      parse_tf_config(R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": "1"}})");
  EXPECT_EQ(r.task_id(), 1);
  EXPECT_EQ(r.id_in_cluster(), 1);
}

class LocalMode : public ::testing::TestWithParam<const char*> {};

TEST_P(LocalMode, IsOneChiefWorkerWithoutTask) {
  const TFConfigClusterResolver r = parse_tf_config(GetParam());
  EXPECT_FALSE(r.in_multi_worker_mode());
  EXPECT_TRUE(r.cluster_spec().empty());
  EXPECT_EQ(r.num_workers(), 1);
  EXPECT_EQ(r.id_in_cluster(), 0);
  EXPECT_TRUE(r.is_chief());
  EXPECT_EQ(r.task_type(), std::nullopt);
  EXPECT_EQ(r.task_id(), std::nullopt);
  EXPECT_EQ(r.collective_leader(), "");
  EXPECT_EQ(r, TFConfigClusterResolver());
}

INSTANTIATE_TEST_SUITE_P(Configs, LocalMode,
                         ::testing::Values("{}", "  {\n}\n", R"({"cluster": {}})",
                                           // A task without a cluster is ignored, as in TF.
                                           R"({"task": {"type": "worker", "index": 3}})",
                                           R"({"cluster": {}, "task": {"type": "chief", "index": 0}})"));

TEST(ParseTfConfig, RpcLayerIsKeptInLocalMode) {
  EXPECT_EQ(parse_tf_config(R"({"rpc_layer": "grpc"})").rpc_layer(), "grpc");
  EXPECT_EQ(parse_tf_config("{}").rpc_layer(), "");
}

// ---------------------------------------------------------------------------
// parse_tf_config: every error is an InvalidArgumentError naming the field

TEST(ParseTfConfigErrors, IndexOutOfRangeMessage) {
  EXPECT_EQ(parse_error(R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 5}})"),
            "TF_CONFIG: \"task.index\": expected an integer in [0, 2) (the number of \"worker\" tasks), got 5");
}

struct BadConfig {
  const char* name;
  std::string json;
  std::vector<std::string> expected;  // substrings of the message
};

std::ostream& operator<<(std::ostream& os, const BadConfig& c) { return os << c.name; }

class ParseTfConfigRejects : public ::testing::TestWithParam<BadConfig> {};

TEST_P(ParseTfConfigRejects, NamesTheField) {
  const std::string message = parse_error(GetParam().json);
  EXPECT_THAT(message, StartsWith("TF_CONFIG: "));
  for (const std::string& part : GetParam().expected) EXPECT_THAT(message, HasSubstr(part));
}

constexpr const char* kTwoWorkers = R"("cluster": {"worker": ["a:1", "b:1"]})";

std::vector<BadConfig> bad_configs() {
  const std::string w = kTwoWorkers;
  return {
      {"InvalidJson", "{\"cluster\": ", {"expected a JSON object", "invalid JSON", "parse error"}},
      {"Empty", "", {"expected a JSON object", "an empty string"}},
      {"TopLevelList", "[1, 2]", {"at the top level", "got a list"}},
      {"TopLevelString", "\"worker\"", {"at the top level", "got a string (\"worker\")"}},
      {"ClusterNotObject", R"({"cluster": ["a:1"]})", {"\"cluster\": expected an object", "got a list"}},
      {"ClusterNull", R"({"cluster": null})", {"\"cluster\": expected an object", "got null"}},
      {"JobNotList", R"({"cluster": {"worker": "a:1"}})", {"\"cluster.worker\": expected a list", "got a string"}},
      {"JobSparseObject", R"({"cluster": {"worker": {"0": "a:1"}}})", {"\"cluster.worker\":", "got an object"}},
      {"TaskAddressNotString",
       R"({"cluster": {"worker": ["a:1", 7]}})",
       {"\"cluster.worker[1]\": expected a \"host:port\" string", "got a number (7)"}},
      {"RpcLayerNotString", R"({"rpc_layer": 1})", {"\"rpc_layer\": expected a string", "got a number (1)"}},
      {"TaskMissing", "{" + w + "}", {"\"task\":", "must also be given", "got no \"task\""}},
      {"TaskNotObject", "{" + w + R"(, "task": "worker"})", {"\"task\": expected an object"}},
      {"TaskTypeMissing", "{" + w + R"(, "task": {"index": 0}})", {"\"task.type\":", "must also be given"}},
      {"TaskIndexMissing", "{" + w + R"(, "task": {"type": "worker"}})", {"\"task.index\":", "must also be given"}},
      {"TaskTypeNotString",
       "{" + w + R"(, "task": {"type": 123456, "index": 0}})",
       {"\"task.type\": expected a string", "got a number (123456)"}},
      {"TaskTypeUnrecognized",
       R"({"cluster": {"master": ["m:1"]}, "task": {"type": "master", "index": 0}})",
       {"\"task.type\": expected one of \"chief\", \"worker\", \"evaluator\", \"ps\"", "got \"master\""}},
      {"TaskTypeNotInCluster",
       "{" + w + R"(, "task": {"type": "chief", "index": 0}})",
       {"\"task.type\": expected a job of the cluster (\"worker\")", "got \"chief\""}},
      {"TwoChiefs",
       R"({"cluster": {"chief": ["c0:1", "c1:1"], "worker": ["w:1"]}, "task": {"type": "worker", "index": 0}})",
       {"\"cluster.chief\": expected at most one \"chief\" task", "got 2"}},
      {"TwoEvaluators",
       R"({"cluster": {"worker": ["w:1"], "evaluator": ["e0:1", "e1:1"]}, "task": {"type": "worker", "index": 0}})",
       {"\"cluster.evaluator\": expected at most one \"evaluator\" task", "got 2"}},
      {"IndexNegative",
       "{" + w + R"(, "task": {"type": "worker", "index": -1}})",
       {"\"task.index\": expected an integer in [0, 2)", "got -1"}},
      {"IndexEqualsCount",
       "{" + w + R"(, "task": {"type": "worker", "index": 2}})",
       {"\"task.index\": expected an integer in [0, 2)", "got 2"}},
      {"IndexOfChiefOutOfRange",
       R"({"cluster": {"chief": ["c:1"], "worker": ["w:1"]}, "task": {"type": "chief", "index": 1}})",
       {"\"task.index\": expected an integer in [0, 1) (the number of \"chief\" tasks)", "got 1"}},
      {"IndexFloat",
       "{" + w + R"(, "task": {"type": "worker", "index": 1.5}})",
       {"\"task.index\": expected an integer", "got a number (1.5)"}},
      {"IndexBool",
       "{" + w + R"(, "task": {"type": "worker", "index": true}})",
       {"\"task.index\": expected an integer", "got a boolean (true)"}},
      {"IndexNonNumericString",
       "{" + w + R"(, "task": {"type": "worker", "index": "one"}})",
       {"\"task.index\": expected an integer", "got a string (\"one\")"}},
      {"IndexNull",
       "{" + w + R"(, "task": {"type": "worker", "index": null}})",
       {"\"task.index\": expected an integer", "got null"}},
      {"IndexHuge",
       "{" + w + R"(, "task": {"type": "worker", "index": 18446744073709551615}})",
       {"\"task.index\": expected an integer that fits in 64 bits", "18446744073709551615"}},
      // nlohmann::json raises out_of_range (not parse_error) for a number
      // beyond a double; it was not caught (issue 12, item 13).
      {"NumberBeyondADouble",
       "{" + std::string(R"("cluster": {"worker": ["a:1"]})") + R"(, "task": {"type": "worker", "index": 0}, "x": 1e400})",
       {"expected a JSON object whose numbers fit in a double", "1e400"}},
      {"NegativeNumberBeyondADoubleInTheCluster",
       R"({"cluster": {"worker": [-1e400]}})",
       {"fit in a double", "-1e400"}},
      // The task's shape is checked even when there is no cluster.
      {"IndexNotIntegerInLocalMode",
       R"({"task": {"type": "worker", "index": "x"}})",
       {"\"task.index\": expected an integer"}},
  };
}

INSTANTIATE_TEST_SUITE_P(Configs, ParseTfConfigRejects, ::testing::ValuesIn(bad_configs()),
                         [](const ::testing::TestParamInfo<BadConfig>& p) { return std::string(p.param.name); });

TEST(ParseTfConfigErrors, UnrecognizedTypeIsReportedBeforeMissingJob) {
  // TF's order: the type's name is checked before the cluster's jobs.
  EXPECT_THAT(parse_error(std::string("{") + kTwoWorkers + R"(, "task": {"type": "master", "index": 0}})"),
              HasSubstr("expected one of"));
}

// ---------------------------------------------------------------------------
// TFConfigClusterResolver::create: the same checks, naming the arguments

TEST(CreateResolver, ValidClusterMatchesParsedOne) {
  const ClusterSpec spec{{{"chief", {"c0:2222"}}, {"worker", {"w0:2222", "w1:2222"}}}};
  const TFConfigClusterResolver r = TFConfigClusterResolver::create(spec, "worker", 1);
  EXPECT_EQ(r, parse_tf_config(chief_and_two_workers("worker", 1)));
  EXPECT_EQ(r.id_in_cluster(), 2);
}

TEST(CreateResolver, EmptySpecIsLocalMode) {
  const TFConfigClusterResolver r = TFConfigClusterResolver::create(ClusterSpec{}, "worker", 7, "grpc");
  EXPECT_FALSE(r.in_multi_worker_mode());
  EXPECT_EQ(r.task_type(), std::nullopt);
  EXPECT_EQ(r.num_workers(), 1);
  EXPECT_EQ(r.rpc_layer(), "grpc");
}

TEST(CreateResolver, ErrorsNameTheArgument) {
  const ClusterSpec workers{{{"worker", {"a:1", "b:1"}}}};
  EXPECT_EQ(message_of<InvalidArgumentError>([&] { TFConfigClusterResolver::create(workers, "worker", 2); }),
            "task_id: expected an integer in [0, 2) (the number of \"worker\" tasks), got 2");
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { TFConfigClusterResolver::create(workers, "boss", 0); }),
              StartsWith("task_type: expected one of"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { TFConfigClusterResolver::create(workers, "ps", 0); }),
              StartsWith("task_type: expected a job of the cluster"));
  const ClusterSpec two_chiefs{{{"chief", {"a:1", "b:1"}}}};
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { TFConfigClusterResolver::create(two_chiefs, "chief", 0); }),
              StartsWith("cluster_spec[\"chief\"]: expected at most one"));
}

TEST(CreateResolver, EmptyChiefJobCountsAsNoChief) {
  const ClusterSpec spec{{{"chief", {}}, {"worker", {"a:1", "b:1"}}}};
  const TFConfigClusterResolver r = TFConfigClusterResolver::create(spec, "worker", 0);
  EXPECT_TRUE(r.is_chief());
  EXPECT_EQ(r.num_workers(), 2);
  EXPECT_EQ(r.collective_leader(), "/job:worker/replica:0/task:0");
}

// ---------------------------------------------------------------------------
// read_cluster_environment

using Env = std::map<std::string, std::string>;

EnvironmentLookup lookup_in(const Env& env) {
  return [env](const std::string& name) -> std::optional<std::string> {
    const auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

TEST(ReadClusterEnvironment, NothingSet) {
  const ClusterEnvironment env = read_cluster_environment(lookup_in({{"PATH", "/bin"}}));
  EXPECT_EQ(env.tf_config, std::nullopt);
  EXPECT_EQ(env.launcher, std::nullopt);
}

TEST(ReadClusterEnvironment, ReadsTfConfig) {
  const ClusterEnvironment env = read_cluster_environment(
      lookup_in({{"TF_CONFIG", R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}})"}}));
  ASSERT_TRUE(env.tf_config.has_value());
  EXPECT_EQ(env.tf_config->num_workers(), 2);
  EXPECT_EQ(env.tf_config->id_in_cluster(), 1);
  EXPECT_EQ(env.launcher, std::nullopt);
}

TEST(ReadClusterEnvironment, InvalidTfConfigIsAnError) {
  EXPECT_THAT(message_of<InvalidArgumentError>([] {
                read_cluster_environment(lookup_in({{"TF_CONFIG", R"({"cluster": {"worker": 3}})"}}));
              }),
              HasSubstr("TF_CONFIG: \"cluster.worker\""));
  // A number beyond a double: nlohmann::json's out_of_range is not let out.
  EXPECT_THAT(message_of<InvalidArgumentError>([] {
                read_cluster_environment(lookup_in(
                    {{"TF_CONFIG", R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}, "x": 1e400})"}}));
              }),
              HasSubstr("TF_CONFIG: expected a JSON object whose numbers fit in a double"));
  // Set but empty is not valid JSON (TF's json.loads fails too).
  EXPECT_THAT(message_of<InvalidArgumentError>([] {
                read_cluster_environment(lookup_in({{"TF_CONFIG", ""}}));
              }),
              HasSubstr("an empty string"));
}

struct LauncherCase {
  Launcher launcher;
  const char* rank_variable;
  const char* size_variable;
  const char* name;
};

std::ostream& operator<<(std::ostream& os, const LauncherCase& c) { return os << c.rank_variable; }

class EachLauncher : public ::testing::TestWithParam<LauncherCase> {};

TEST_P(EachLauncher, ReadsRankAndSize) {
  const LauncherCase& c = GetParam();
  const ClusterEnvironment env = read_cluster_environment(lookup_in({{c.rank_variable, "2"}, {c.size_variable, "4"}}));
  ASSERT_TRUE(env.launcher.has_value());
  EXPECT_EQ(*env.launcher, (LauncherRank{c.launcher, 2, 4, c.rank_variable, c.size_variable}));
  EXPECT_EQ(launcher_name(c.launcher), c.name);
  EXPECT_EQ(env.tf_config, std::nullopt);
}

TEST_P(EachLauncher, RejectsBadValuesNamingTheVariable) {
  const LauncherCase& c = GetParam();
  auto error = [&](const Env& env) {
    return message_of<InvalidArgumentError>([&] { read_cluster_environment(lookup_in(env)); });
  };
  const std::string rank = c.rank_variable;
  const std::string size = c.size_variable;
  EXPECT_THAT(error({{rank, "abc"}, {size, "4"}}),
              AllOf(StartsWith(rank), HasSubstr("expected an integer in [0, 4)"), HasSubstr("got \"abc\"")));
  EXPECT_THAT(error({{rank, "4"}, {size, "4"}}), AllOf(StartsWith(rank), HasSubstr("got \"4\"")));
  EXPECT_THAT(error({{rank, "-1"}, {size, "4"}}), AllOf(StartsWith(rank), HasSubstr("got \"-1\"")));
  EXPECT_THAT(error({{rank, ""}, {size, "4"}}), AllOf(StartsWith(rank), HasSubstr("got \"\"")));
  EXPECT_THAT(error({{rank, "1 "}, {size, "4"}}), AllOf(StartsWith(rank), HasSubstr("got \"1 \"")));
  EXPECT_THAT(error({{rank, "0"}, {size, "0"}}),
              AllOf(StartsWith(size), HasSubstr("expected an integer >= 1"), HasSubstr("got \"0\"")));
  EXPECT_THAT(error({{rank, "0"}, {size, "four"}}), AllOf(StartsWith(size), HasSubstr("got \"four\"")));
  EXPECT_THAT(error({{rank, "0"}}), AllOf(StartsWith(size), HasSubstr(rank + "=0"), HasSubstr("unset")));
}

INSTANTIATE_TEST_SUITE_P(Launchers, EachLauncher,
                         ::testing::Values(LauncherCase{Launcher::kOpenMpi, "OMPI_COMM_WORLD_RANK",
                                                        "OMPI_COMM_WORLD_SIZE", "Open MPI"},
                                           LauncherCase{Launcher::kPmi, "PMI_RANK", "PMI_SIZE", "PMI (MPICH/Hydra)"},
                                           LauncherCase{Launcher::kSlurm, "SLURM_PROCID", "SLURM_NTASKS", "Slurm"}));

TEST(ReadClusterEnvironment, MpiLauncherWinsOverSlurmAllocation) {
  // mpirun inside an sbatch allocation: the batch step's SLURM_* variables are
  // inherited but the ranks are Open MPI's.
  const Env env{{"SLURM_PROCID", "0"},         {"SLURM_NTASKS", "8"}, {"OMPI_COMM_WORLD_RANK", "3"},
                {"OMPI_COMM_WORLD_SIZE", "4"}, {"PMI_RANK", "1"},     {"PMI_SIZE", "2"}};
  const ClusterEnvironment read = read_cluster_environment(lookup_in(env));
  ASSERT_TRUE(read.launcher.has_value());
  EXPECT_EQ(read.launcher->launcher, Launcher::kOpenMpi);
  EXPECT_EQ(read.launcher->rank, 3);
  EXPECT_EQ(read.launcher->size, 4);

  Env without_ompi = env;
  without_ompi.erase("OMPI_COMM_WORLD_RANK");
  without_ompi.erase("OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(read_cluster_environment(lookup_in(without_ompi)).launcher->launcher, Launcher::kPmi);
}

TEST(ReadClusterEnvironment, ReadsTfConfigAndLauncherTogether) {
  const ClusterEnvironment env = read_cluster_environment(
      lookup_in({{"TF_CONFIG", chief_and_two_workers("worker", 0)}, {"PMI_RANK", "1"}, {"PMI_SIZE", "3"}}));
  ASSERT_TRUE(env.tf_config.has_value());
  ASSERT_TRUE(env.launcher.has_value());
  EXPECT_EQ(env.tf_config->id_in_cluster(), 1);
  EXPECT_EQ(env.launcher->rank, 1);
}

TEST(GetenvLookup, ReadsTheProcessEnvironment) {
  const std::string name = "DISTRIBUTE_CLUSTER_RESOLVER_TEST_VARIABLE";
  ASSERT_EQ(::unsetenv(name.c_str()), 0);
  EXPECT_EQ(getenv_lookup(name), std::nullopt);
  ASSERT_EQ(::setenv(name.c_str(), "value 1", 1), 0);
  EXPECT_EQ(getenv_lookup(name), "value 1");
  ASSERT_EQ(::setenv(name.c_str(), "", 1), 0);
  EXPECT_EQ(getenv_lookup(name), "");
  ASSERT_EQ(::unsetenv(name.c_str()), 0);
}

// ---------------------------------------------------------------------------
// reconcile_cluster

ClusterEnvironment with_tf_config(const std::string& json) { return ClusterEnvironment{parse_tf_config(json), {}}; }

TEST(ReconcileCluster, MpiAloneIsAuthoritative) {
  EXPECT_EQ(reconcile_cluster(ClusterEnvironment{}, 2, 4), (WorkerPlacement{4, 2, false, std::nullopt, std::nullopt}));
  EXPECT_EQ(reconcile_cluster(ClusterEnvironment{}, 0, 4), (WorkerPlacement{4, 0, true, std::nullopt, std::nullopt}));
  EXPECT_EQ(reconcile_cluster(ClusterEnvironment{}, 0, 1), (WorkerPlacement{1, 0, true, std::nullopt, std::nullopt}));
  // A TF_CONFIG without a cluster says nothing about the workers.
  EXPECT_EQ(reconcile_cluster(with_tf_config(R"({"task": {"type": "worker", "index": 0}})"), 1, 2),
            (WorkerPlacement{2, 1, false, std::nullopt, std::nullopt}));
}

TEST(ReconcileCluster, AgreeingTfConfigGivesItsTask) {
  EXPECT_EQ(reconcile_cluster(with_tf_config(chief_and_two_workers("worker", 1)), 2, 3),
            (WorkerPlacement{3, 2, false, "worker", 1}));
  EXPECT_EQ(reconcile_cluster(with_tf_config(chief_and_two_workers("chief", 0)), 0, 3),
            (WorkerPlacement{3, 0, true, "chief", 0}));
  EXPECT_EQ(reconcile_cluster(with_tf_config(
                                  R"({"cluster": {"worker": ["w:1"], "evaluator": ["e:1"]},
                                      "task": {"type": "evaluator", "index": 0}})"),
                              0, 1),
            (WorkerPlacement{1, 0, true, "evaluator", 0}));
}

TEST(ReconcileCluster, SizeMismatchNamesBothCounts) {
  const std::string message = message_of<InvalidArgumentError>(
      [] { reconcile_cluster(with_tf_config(chief_and_two_workers("worker", 0)), 1, 4); });
  EXPECT_THAT(message, AllOf(HasSubstr("TF_CONFIG describes 3 workers (1 \"chief\" + 2 \"worker\" tasks)"),
                             HasSubstr("MPI rank 1 of size 4")));
}

TEST(ReconcileCluster, RankMismatchNamesBothIds) {
  const std::string message = message_of<InvalidArgumentError>(
      [] { reconcile_cluster(with_tf_config(chief_and_two_workers("worker", 1)), 1, 3); });
  EXPECT_THAT(message, AllOf(HasSubstr("\"worker\" task 1 has id_in_cluster 2"), HasSubstr("MPI rank 1 of size 3")));
}

TEST(ReconcileCluster, PsTaskCannotBeAWorker) {
  const std::string message = message_of<InvalidArgumentError>([] {
    reconcile_cluster(with_tf_config(R"({"cluster": {"ps": ["p:1"], "worker": ["w:1"]},
                                         "task": {"type": "ps", "index": 0}})"),
                      0, 1);
  });
  EXPECT_THAT(message, AllOf(StartsWith("TF_CONFIG: \"task.type\""), HasSubstr("got \"ps\"")));
}

TEST(ReconcileCluster, LauncherMustMatchTheCommunicator) {
  ClusterEnvironment env;
  env.launcher = LauncherRank{Launcher::kSlurm, 0, 8, "SLURM_PROCID", "SLURM_NTASKS"};
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { reconcile_cluster(env, 0, 1); }),
              AllOf(HasSubstr("SLURM_PROCID=0 and SLURM_NTASKS=8 (set by Slurm)"), HasSubstr("MPI rank 0 of size 1")));
  env.launcher = LauncherRank{Launcher::kOpenMpi, 1, 2, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"};
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { reconcile_cluster(env, 0, 2); }),
              AllOf(HasSubstr("OMPI_COMM_WORLD_RANK=1"), HasSubstr("MPI rank 0 of size 2")));
  EXPECT_EQ(reconcile_cluster(env, 1, 2), (WorkerPlacement{2, 1, false, std::nullopt, std::nullopt}));
}

TEST(ReconcileCluster, RejectsAnImpossibleCommunicator) {
  for (const auto& [rank, size] : std::vector<std::pair<int, int>>{{-1, 2}, {2, 2}, {0, 0}}) {
    EXPECT_THAT(message_of<InvalidArgumentError>([&] { reconcile_cluster(ClusterEnvironment{}, rank, size); }),
                HasSubstr("got mpi_rank " + std::to_string(rank) + " and mpi_size " + std::to_string(size)));
  }
}

}  // namespace
}  // namespace distribute
