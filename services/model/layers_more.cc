// The factory of the layers added for Functional models (one file per
// family beside this one; layers_more.h lists them).
#include "services/model/layer_factories.h"
#include "services/model/layers_more.h"

namespace tfjob::model {

std::string_view MoreLayerTypeName(LayerType t) {
  switch (t) {
    case LayerType::kReLU: return "ReLU";
    case LayerType::kLeakyReLU: return "LeakyReLU";
    case LayerType::kPReLU: return "PReLU";
    case LayerType::kELU: return "ELU";
    case LayerType::kSoftmax: return "Softmax";
    case LayerType::kThresholdedReLU: return "ThresholdedReLU";
    case LayerType::kRescaling: return "Rescaling";
    case LayerType::kLayerNormalization: return "LayerNormalization";
    case LayerType::kPermute: return "Permute";
    case LayerType::kRepeatVector: return "RepeatVector";
    case LayerType::kSpatialDropout1D: return "SpatialDropout1D";
    case LayerType::kSpatialDropout2D: return "SpatialDropout2D";
    case LayerType::kGaussianNoise: return "GaussianNoise";
    case LayerType::kGaussianDropout: return "GaussianDropout";
    case LayerType::kGlobalMaxPooling1D: return "GlobalMaxPooling1D";
    case LayerType::kGlobalMaxPooling2D: return "GlobalMaxPooling2D";
    case LayerType::kGlobalAveragePooling1D: return "GlobalAveragePooling1D";
    case LayerType::kMaxPooling1D: return "MaxPooling1D";
    case LayerType::kAveragePooling1D: return "AveragePooling1D";
    case LayerType::kConv1D: return "Conv1D";
    case LayerType::kZeroPadding1D: return "ZeroPadding1D";
    case LayerType::kZeroPadding2D: return "ZeroPadding2D";
    case LayerType::kCropping1D: return "Cropping1D";
    case LayerType::kCropping2D: return "Cropping2D";
    case LayerType::kUpSampling1D: return "UpSampling1D";
    case LayerType::kUpSampling2D: return "UpSampling2D";
    case LayerType::kDepthwiseConv2D: return "DepthwiseConv2D";
    case LayerType::kSeparableConv2D: return "SeparableConv2D";
    case LayerType::kConv2DTranspose: return "Conv2DTranspose";
    case LayerType::kCategoryEncoding: return "CategoryEncoding";
    case LayerType::kHashing: return "Hashing";
    case LayerType::kSimpleRNN: return "SimpleRNN";
    case LayerType::kLSTM: return "LSTM";
    case LayerType::kGRU: return "GRU";
    case LayerType::kBidirectional: return "Bidirectional";
    case LayerType::kTimeDistributed: return "TimeDistributed";
    case LayerType::kMasking: return "Masking";
    case LayerType::kTextVectorization: return "TextVectorization";
    case LayerType::kOutputPart: return "OutputPart";
    default: return "?";
  }
}

namespace internal {

StatusOr<std::unique_ptr<Layer>> MakeMoreLayer(const LayerSpec& spec) {
  switch (spec.type) {
    case LayerType::kReLU:
    case LayerType::kLeakyReLU:
    case LayerType::kPReLU:
    case LayerType::kELU:
    case LayerType::kSoftmax:
    case LayerType::kThresholdedReLU:
    case LayerType::kRescaling: return MakeActivationLayer(spec);
    case LayerType::kLayerNormalization: return MakeLayerNormalization(spec);
    case LayerType::kPermute:
    case LayerType::kRepeatVector:
    case LayerType::kZeroPadding1D:
    case LayerType::kZeroPadding2D:
    case LayerType::kCropping1D:
    case LayerType::kCropping2D:
    case LayerType::kUpSampling1D:
    case LayerType::kUpSampling2D: return MakeShapeLayer(spec);
    case LayerType::kSpatialDropout1D:
    case LayerType::kSpatialDropout2D:
    case LayerType::kGaussianNoise:
    case LayerType::kGaussianDropout: return MakeNoiseLayer(spec);
    case LayerType::kGlobalMaxPooling1D:
    case LayerType::kGlobalMaxPooling2D:
    case LayerType::kGlobalAveragePooling1D:
    case LayerType::kMaxPooling1D:
    case LayerType::kAveragePooling1D: return MakePoolingMore(spec);
    case LayerType::kConv1D:
    case LayerType::kDepthwiseConv2D:
    case LayerType::kSeparableConv2D:
    case LayerType::kConv2DTranspose: return MakeConvMore(spec);
    case LayerType::kCategoryEncoding:
    case LayerType::kHashing: return MakeEncodingLayer(spec);
    case LayerType::kSimpleRNN:
    case LayerType::kLSTM:
    case LayerType::kGRU: return MakeRecurrent(spec);
    case LayerType::kBidirectional:
    case LayerType::kTimeDistributed: return MakeWrapper(spec);
    case LayerType::kMasking: return MakeMasking(spec);
    case LayerType::kTextVectorization: return MakeTextVectorization(spec);
    case LayerType::kOutputPart: return MakeOutputPart(spec);
    default: return InvalidArgument("layer \"" + spec.name + "\": unknown layer type");
  }
}

}  // namespace internal
}  // namespace tfjob::model
