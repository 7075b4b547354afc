// Slurm's compressed lists and SlurmClusterResolver on synthetic job-step
// environments. Expected values from TF's slurm_cluster_resolver.py
// docstrings and slurm_cluster_resolver_test.py where they exist.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "distribute/cluster_resolver.h"
#include "distribute/errors.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::message_of;

EnvironmentLookup environment(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(SlurmHostlist, ExpandsAsTfsDocstringSays) {
  EXPECT_THAT(expand_slurm_hostlist("n[1-2],m5,o[3-4,6,7-9]"),
              ElementsAre("n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"));
  EXPECT_THAT(expand_slurm_hostlist("n1"), ElementsAre("n1"));
  EXPECT_THAT(expand_slurm_hostlist("n[1,3]"), ElementsAre("n1", "n3"));
}

TEST(SlurmHostlist, KeepsZeroPaddingAndExpandsEveryBracketGroup) {
  EXPECT_THAT(expand_slurm_hostlist("node[01-03,07]"), ElementsAre("node01", "node02", "node03", "node07"));
  EXPECT_THAT(expand_slurm_hostlist("n[08-11]"), ElementsAre("n08", "n09", "n10", "n11"));
  EXPECT_THAT(expand_slurm_hostlist("r[1-2]n[1-2],login"), ElementsAre("r1n1", "r1n2", "r2n1", "r2n2", "login"));
  EXPECT_THAT(expand_slurm_hostlist("[1-2]x"), ElementsAre("1x", "2x"));
  // Order kept, duplicates kept (as TF).
  EXPECT_THAT(expand_slurm_hostlist("b,a,b"), ElementsAre("b", "a", "b"));
}

TEST(SlurmHostlist, BadListsNameTheProblemAndWhere) {
  const auto bad = [](const char* list) {
    return message_of<InvalidArgumentError>([&] { expand_slurm_hostlist(list); });
  };
  EXPECT_THAT(bad(""), HasSubstr("at offset 0, expected a host name, got an empty one"));
  EXPECT_THAT(bad("a,,b"), HasSubstr("at offset 2, expected a host name"));
  EXPECT_THAT(bad("n[1-3"), HasSubstr("at offset 1, expected ']' to close '['"));
  EXPECT_THAT(bad("n1-3]"), HasSubstr("expected '[' before ']'"));
  EXPECT_THAT(bad("n[1-[2]]"), HasSubstr("expected no '[' inside []"));
  EXPECT_THAT(bad("n[3-1]"), HasSubstr("expected an ascending range, got \"3-1\""));
  EXPECT_THAT(bad("n[a-b]"), HasSubstr("expected a number or a range like 01-03 inside [], got \"a-b\""));
  EXPECT_THAT(bad("n[]"), HasSubstr("got \"\""));
  EXPECT_THAT(bad("n[1-2-3]"), HasSubstr("got \"1-2-3\""));
  EXPECT_THAT(bad("n[0-999999999]"), HasSubstr("expected at most 1048576 hosts"));
  EXPECT_THAT(bad("a[0-1023]b[0-1023]c[0-1]"), HasSubstr("expected at most 1048576 hosts"));
  EXPECT_THAT(bad("n[1-2"), HasSubstr("Slurm host list \"n[1-2\""));
  EXPECT_THAT(bad("n[-0]"), HasSubstr("got \"-0\""));
  // Bounded work and memory whatever the text.
  EXPECT_THAT(bad(("[0-9]" + std::string(300, 'x')).c_str()), HasSubstr("expected host names of at most 255 characters"));
  EXPECT_THAT(bad("a[0-1][0][0][0][0][0][0][0][0]"), HasSubstr("expected at most 8 bracketed ranges in one host name"));
  EXPECT_THAT(expand_slurm_hostlist("a[0-1][0][0][0][0][0][0][0]"), ElementsAre("a00000000", "a10000000"));
}

TEST(SlurmTasksPerNode, ExpandsAsTfsDocstringSays) {
  EXPECT_THAT(expand_slurm_tasks_per_node("3(x2),2,1"), ElementsAre(3, 3, 2, 1));
  EXPECT_THAT(expand_slurm_tasks_per_node("4"), ElementsAre(4));
  for (const char* bad : {"", "0", "2(x0)", "2(x", "2(y3)", "x", "3,,1", "-1", "2(x3)1", "1(x2000000)"}) {
    EXPECT_THAT(message_of<InvalidArgumentError>([&] { expand_slurm_tasks_per_node(bad); }),
                HasSubstr("expected parts like 3 or 3(x2)"))
        << bad;
  }
}

// TF's testMultiTaskPerNodeRetrieval, with the task configuration from the
// step's variables: 5 tasks, 2 on each of the first two hosts, rank 1.
TEST(SlurmClusterResolver, BuildsTfsClusterSpecAndPlacesTheTask) {
  const SlurmClusterResolver r = SlurmClusterResolver::from_environment(environment({
      {"SLURM_STEP_NODELIST", "t02n[13,41,43]"},
      {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
      {"SLURM_STEP_NUM_TASKS", "5"},
      {"SLURM_PROCID", "1"},
  }));
  EXPECT_THAT(r.hosts(), ElementsAre("t02n13", "t02n41", "t02n43"));
  EXPECT_THAT(r.tasks_per_node(), ElementsAre(2, 2, 1));
  EXPECT_EQ(r.num_tasks(), 5);
  EXPECT_EQ(r.rank(), 1);
  EXPECT_EQ(r.node_id(), 0);  // block distribution: ranks 0 and 1 on t02n13
  EXPECT_EQ(r.local_rank(), 1);
  EXPECT_EQ(r.host(), "t02n13");
  const ClusterSpec spec = r.cluster_spec({{"ps", 1}, {"worker", 4}});
  EXPECT_THAT(spec.jobs.at("ps"), ElementsAre("t02n13:8888"));
  EXPECT_THAT(spec.jobs.at("worker"), ElementsAre("t02n13:8889", "t02n41:8888", "t02n41:8889", "t02n43:8888"));
  // Every task a worker by default; rank 1 is worker 1, not the chief.
  const TFConfigClusterResolver tf = r.resolve();
  EXPECT_EQ(tf.task_type(), "worker");
  EXPECT_EQ(tf.task_id(), 1);
  EXPECT_EQ(tf.num_workers(), 5);
  EXPECT_FALSE(tf.is_chief());
  EXPECT_EQ(tf.cluster_spec().jobs.at("worker")[4], "t02n43:8888");
  // A chief job: rank 0 is the chief, rank 1 worker 0 (jobs in name order).
  const TFConfigClusterResolver with_chief = r.resolve({{"chief", 1}, {"worker", 4}}, 2222);
  EXPECT_EQ(with_chief.task_type(), "worker");
  EXPECT_EQ(with_chief.task_id(), 0);
  EXPECT_EQ(with_chief.id_in_cluster(), 1);
  EXPECT_THAT(with_chief.cluster_spec().jobs.at("chief"), ElementsAre("t02n13:2222"));
}

TEST(SlurmClusterResolver, LaterRanksLandOnLaterNodesAndSlurmsOwnIdsAreChecked) {
  std::map<std::string, std::string> vars{{"SLURM_JOB_NODELIST", "node[01-03]"},
                                          {"SLURM_TASKS_PER_NODE", "2(x3)"},
                                          {"SLURM_NTASKS", "6"},
                                          {"SLURM_PROCID", "3"}};
  SlurmClusterResolver r = SlurmClusterResolver::from_environment(environment(vars));  // the job's variables
  EXPECT_EQ(r.node_id(), 1);
  EXPECT_EQ(r.local_rank(), 1);
  EXPECT_EQ(r.host(), "node02");
  // srun's own node and local ids win (a cyclic distribution).
  vars["SLURM_NODEID"] = "2";
  vars["SLURM_LOCALID"] = "0";
  r = SlurmClusterResolver::from_environment(environment(vars));
  EXPECT_EQ(r.host(), "node03");
  EXPECT_EQ(r.local_rank(), 0);
  // ... and then the cluster spec's block layout would give this task
  // another host's slot: refused.
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { r.resolve(); }),
              HasSubstr("SLURM_NODEID 2 and SLURM_LOCALID 0 place rank 3 elsewhere: launch with srun "
                        "--distribution=block"));
  vars["SLURM_NODEID"] = "1";
  vars["SLURM_LOCALID"] = "1";  // where the block distribution puts it
  EXPECT_EQ(SlurmClusterResolver::from_environment(environment(vars)).resolve().task_id(), 3);
  vars["SLURM_NODEID"] = "2";
  vars["SLURM_LOCALID"] = "0";
  vars["SLURM_LOCALID"] = "2";
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { SlurmClusterResolver::from_environment(environment(vars)); }),
              HasSubstr("SLURM_LOCALID: expected an integer in [0, 2) (the tasks on node 2, node03), got \"2\""));
  vars.erase("SLURM_LOCALID");
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { SlurmClusterResolver::from_environment(environment(vars)); }),
              HasSubstr("SLURM_LOCALID is not set, and SLURM_NODEID 2 is not where a block distribution puts rank 3"));
  vars["SLURM_NODEID"] = "3";
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { SlurmClusterResolver::from_environment(environment(vars)); }),
              HasSubstr("SLURM_NODEID: expected an integer in [0, 3) (the step's hosts), got \"3\""));
}

TEST(SlurmClusterResolver, InconsistentOrMissingVariablesAreNamed) {
  const std::map<std::string, std::string> good{{"SLURM_STEP_NODELIST", "n[1-2]"},
                                                {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
                                                {"SLURM_STEP_NUM_TASKS", "4"},
                                                {"SLURM_PROCID", "0"}};
  const auto with = [&](const std::string& name, std::optional<std::string> value) {
    std::map<std::string, std::string> vars = good;
    if (value) {
      vars[name] = *value;
    } else {
      vars.erase(name);
    }
    return environment(vars);
  };
  EXPECT_THAT(message_of<FailedPreconditionError>(
                  [&] { SlurmClusterResolver::from_environment(with("SLURM_PROCID", std::nullopt)); }),
              HasSubstr("SLURM_PROCID not found in the environment (not running inside a Slurm job step?)"));
  EXPECT_THAT(message_of<FailedPreconditionError>(
                  [&] { SlurmClusterResolver::from_environment(with("SLURM_STEP_NODELIST", std::nullopt)); }),
              HasSubstr("SLURM_STEP_NODELIST or SLURM_JOB_NODELIST or SLURM_NODELIST not found"));
  EXPECT_THAT(message_of<InvalidArgumentError>(
                  [&] { SlurmClusterResolver::from_environment(with("SLURM_STEP_TASKS_PER_NODE", "2(x3)")); }),
              HasSubstr("SLURM_STEP_TASKS_PER_NODE \"2(x3)\" gives 3 node(s), expected one per host of "
                        "SLURM_STEP_NODELIST \"n[1-2]\" (2)"));
  EXPECT_THAT(message_of<InvalidArgumentError>(
                  [&] { SlurmClusterResolver::from_environment(with("SLURM_STEP_NUM_TASKS", "5")); }),
              HasSubstr("SLURM_STEP_NUM_TASKS: expected 4 (the sum of 2(x2) tasks per node), got \"5\""));
  EXPECT_THAT(message_of<InvalidArgumentError>(
                  [&] { SlurmClusterResolver::from_environment(with("SLURM_PROCID", "4")); }),
              HasSubstr("SLURM_PROCID: expected an integer in [0, 4), got \"4\""));
  EXPECT_THAT(message_of<InvalidArgumentError>(
                  [&] { SlurmClusterResolver::from_environment(with("SLURM_PROCID", " 1")); }),
              HasSubstr("got \" 1\""));
  EXPECT_THAT(message_of<InvalidArgumentError>(
                  [&] { SlurmClusterResolver::from_environment(with("SLURM_STEP_NODELIST", "n2,n1,n2")); }),
              HasSubstr("host \"n2\" is listed twice"));
  const SlurmClusterResolver r = SlurmClusterResolver::from_environment(environment(good));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { r.cluster_spec({{"worker", 3}}); }),
              HasSubstr("the jobs ask for 3 tasks, the Slurm step has 4"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { r.cluster_spec({}, 65535); }),
              HasSubstr("port_base: expected ports in [1, 65535] for 2 task(s) on a host, got 65535"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { r.resolve({{"trainer", 4}}); }),
              HasSubstr("jobs: expected names among chief, worker, evaluator and ps (the tasks TF places), got "
                        "\"trainer\""));
  // Jobs in name order: rank 0 is "ps" task 0, which TF does not count as a worker.
  const TFConfigClusterResolver ps = r.resolve({{"worker", 2}, {"ps", 2}});
  EXPECT_EQ(ps.task_type(), "ps");
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { (void)ps.num_workers(); }), HasSubstr("ps"));
}

}  // namespace
}  // namespace distribute
