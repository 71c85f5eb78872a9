// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief The one setup path: settings + weight table + transport → the machine the plan sees →
/// the plan and runtime options of the component's route → an offloader.
///
/// The five ways in (docs/getting-started.md: enable_offload, with_offload_backend,
/// enable_pipeline_offload, prepare_offload / with_prepared_offload, and an offloader running
/// what setup_offload decided), ddo-run, ddo-plan and the benchmarks all go through these
/// stages, so for the same inputs ddo-plan prints the plan ddo-run runs. One header per job:
///
/// - setup/resolve_stage.hpp: resolve_for(), the resolve stage (model bytes, stated RAM, VMM);
/// - setup/options.hpp: setup_options, what setup takes besides settings, table and transport:
///   the resolution inputs (setup_resolution) and the engine facts (engine_facts);
/// - setup/machine_inputs.hpp: machine_inputs_for(), what the machine stage reads of the
///   settings' provenance and the engine facts, the RAM resolved once (machine_ram, ram_source):
///   with the config and machine_for's capacity, the planner's inputs;
/// - setup/streamed_groups.hpp: streamed_per_group(), what groups stream, in one loop;
/// - setup/machine.hpp: machine_for(), the machine a plan sees (device, ring, reserves, RAM,
///   capacity profile), with setup/window_sizing.hpp for a transport that sizes its staging or
///   window (transport_with_window_sizing);
/// - setup/planner_choice.hpp: planner_for(), the residency planner of a run (by profile);
/// - setup/plan_loop.hpp: the dynamic route's planning through the plan cache
///   (setup/plan_cache.hpp) and its re-plan loop;
/// - setup/setup_offload.hpp: setup_offload(), the route dispatch, its checks and the verbose
///   print;
/// - setup/device_budget.hpp: set_device_budget() / set_device_reserve(), a running offloader
///   moved to another device budget or engine reserve (issue 41);
/// - setup/workload_reserve.hpp: the engine's reserve per workload size (workload_reserve,
///   measure_workload_reserve) and set_device_reserve at a size;
/// - setup/start.hpp: setup_transport(), the transport ddo makes with every device option
///   (make_transport, runtime/transport_setup.hpp: the settings' execution_device and VMM window);
/// - setup/instantiations.hpp: the instantiations compiled once (DDO_SHIPPED_INSTANTIATIONS).

#include "ddo/runtime/transport_setup.hpp"
#include "ddo/setup/instantiations.hpp"
#include "ddo/setup/device_budget.hpp"
#include "ddo/setup/workload_reserve.hpp"
#include "ddo/setup/machine.hpp"
#include "ddo/setup/machine_inputs.hpp"
#include "ddo/setup/options.hpp"
#include "ddo/setup/plan_cache.hpp"
#include "ddo/setup/plan_loop.hpp"
#include "ddo/setup/resolve_stage.hpp"
#include "ddo/setup/planner_choice.hpp"
#include "ddo/setup/setup_offload.hpp"
#include "ddo/setup/stable_address_route.hpp"
#include "ddo/setup/start.hpp"
#include "ddo/setup/streamed_groups.hpp"
#include "ddo/setup/window_sizing.hpp"
