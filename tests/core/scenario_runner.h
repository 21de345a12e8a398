// Runs arbitration scenarios written as data (tests/core/scenarios/*.scenario)
// against the core, so that most behaviour is specified as readable tables.
//
// Format: one command per line; `#` starts a comment. The file starts with
//   # name: <one line>
//   # description: <one line or more>
// Commands (key=value arguments; quantities in milli-GPU, milli-CPU, MiB):
//   model <name> memory_mib=<n> [mig=true]   (MIG profiles from core/mig.h)
//   cluster <name>
//   pool <name> class=serving|batch|spot|dev
//   node <name> pool=<p> gpus=<n> model=<m> [cpu=<milli>] [mem=<mib>] [domain=<d>]
//   team <name> [parent=<team>]
//   quota <team> <pool> <nominal_milli>
//   at <seconds>                       the time of the following commands
//   request <key> team=<t> pool=<p> [class=...(default inference)] [members=<n>]
//           (gpus=<n> | milli=<n> gpu_mem=<mib> | mig=<profile>) [cpu=<milli>]
//           [mem=<mib>]
//           [models=<a|b>] [topology=same_node|same_domain]
//   release <key>
//   expect <key> <admitted|queued|denied|released|cancelled> [reason=<CODE>]
//          [node=<name>] [gpus=<i,j>]  (node/gpus: of member 0, or member=<i>)
//   expect-error <status code name> <field prefix> <the command, as above>
//   expect-used <team> <pool> <milli>
//   expect-gpu <node> <index> milli=<n> [mem=<mib>] [exclusive=true|false]
//   expect-layout <node> <index> <layout, e.g. 3g.40gb@0,3g.40gb@4, or ->
#pragma once

#include <string>

namespace arbiter::testing {

// Runs the scenario in `path`. Failures are reported through gtest with the
// file name and line number.
void RunScenarioFile(const std::string& path);

}  // namespace arbiter::testing
