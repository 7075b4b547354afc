// Umbrella header: everything a user of the library needs.
#pragma once

#include "distribute/checkpoint.h"
#include "distribute/cluster_resolver.h"
#include "distribute/dataset.h"
#include "distribute/device.h"
#include "distribute/distributed_dataset.h"
#include "distribute/distributed_values.h"
#include "distribute/element.h"
#include "distribute/errors.h"
#include "distribute/interrupt.h"
#include "distribute/options.h"
#include "distribute/replica_context.h"
#include "distribute/strategies.h"
#include "distribute/strategy.h"
#include "distribute/tensor.h"
#include "distribute/types.h"
#include "distribute/variable.h"
