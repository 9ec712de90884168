// The dispatch table MakeLayer (layers.cc) looks up: the factory of each
// layer family, each defined in that family's file (conv.cc, pooling.cc,
// normalization.cc, reshaping.cc, preprocessing.cc, merge.cc,
// layers_more.cc). Internal to services/model.
// Thread-safety: the factories are reentrant. Failure: a factory given a
// spec of another family is a programmer error; the ones returning StatusOr
// say INVALID_ARGUMENT for a configuration they cannot build.
#pragma once

#include <memory>

#include "services/model/layers.h"
#include "services/model/preprocessing.h"
#include "services/model/text.h"

namespace tfjob::model::internal {

std::unique_ptr<Layer> MakeConv2D(const LayerSpec& spec);
std::unique_ptr<Layer> MakePooling2D(const LayerSpec& spec);  // max, average, global average
std::unique_ptr<Layer> MakeBatchNormalization(const LayerSpec& spec);
std::unique_ptr<Layer> MakeNormalization(const LayerSpec& spec);
std::unique_ptr<Layer> MakeDropout(const LayerSpec& spec);
std::unique_ptr<Layer> MakeReshape(const LayerSpec& spec);
StatusOr<std::unique_ptr<Layer>> MakeLookupLayer(const LayerSpec& spec);  // String/IntegerLookup
std::unique_ptr<Layer> MakeMerge(const LayerSpec& spec);                  // Add ... Dot (merge.cc)
// The layers added for Functional models (layers_more.cc): their factory,
// INVALID_ARGUMENT for a type that is none of them.
StatusOr<std::unique_ptr<Layer>> MakeMoreLayer(const LayerSpec& spec);
// The table of a lookup layer; nullptr for any other layer.
const Lookup* LookupTable(const Layer& layer);

}  // namespace tfjob::model::internal
