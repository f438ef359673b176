// ONNX NonMaxSuppression (opsets 10 and 11): the selected [batch, class, box] triples, [count, 3]
// int64, as ONNX Runtime's CPU kernel selects them (hipep.ops.detection.select_boxes, step for
// step in f32).
//
// Where hipep claims the op every input is known to the host, which sized the output from the same
// values (count: its rows). One block walks the (batch, class) pairs in order, as the output
// concatenates them: a pair's rows follow the rows of the pairs before it. Per pair:
//   * rank: each candidate (its score strictly above score_threshold, where given) counts the
//     candidates ahead of it: a higher score, or an equal one at a lower box index; NaN scores
//     (possible without a threshold) come after every number, by index, as numpy's stable argsort
//     of the negated scores puts them. The ranks are distinct, so order[rank] = box holds the
//     candidates in the order the CPU takes them;
//   * greedy pass: the candidates in order, each kept unless a box kept before it for the pair
//     suppresses it, until max_output_boxes_per_class are kept. The kept boxes are checked in
//     parallel: thread t owns kept entries t, t + blockDim.x, ... (it writes and reads only those,
//     so the list needs no barrier), and the block's verdict is an OR through a shared flag, one
//     barrier a candidate (three flags in turn: one is set, one read, one cleared for later).
//
// The IoU is the reference's arithmetic in its order: each operation rounded once (the _rn
// intrinsics, never contracted into an FMA), min and max as Python's (NaN in the second operand
// keeps the first), and a box of zero or negative area, or no overlap, never suppresses.
//
// Shared memory (the launch's dynamic part): order [boxes] | kept [boxes], int32 each; the binding
// leaves a spatial dimension past what a launch gets to other EPs.
#include "hipep_device.h"

struct hipep_nms_args {
  hipep_i64 batches;  // num_batches
  hipep_i64 classes;  // num_classes
  hipep_i64 boxes;    // spatial_dimension
  hipep_i64 count;    // the output's rows: the host's count of selected boxes
  int center;         // center_point_box: boxes as [x_center, y_center, width, height]
};

// Python's min and max of two floats: the second operand only where it compares below (above).
HIPEP_DEVICE float hipep_nms_min(float a, float b) { return b < a ? b : a; }
HIPEP_DEVICE float hipep_nms_max(float a, float b) { return b > a ? b : a; }

struct hipep_nms_extent {
  float x0, x1, y0, y1;
};

HIPEP_DEVICE hipep_nms_extent hipep_nms_extents(const float* box, int center) {
  hipep_nms_extent e;
  if (center) {
    const float half_w = __fdiv_rn(box[2], 2.0f), half_h = __fdiv_rn(box[3], 2.0f);
    e.x0 = __fsub_rn(box[0], half_w);
    e.x1 = __fadd_rn(box[0], half_w);
    e.y0 = __fsub_rn(box[1], half_h);
    e.y1 = __fadd_rn(box[1], half_h);
  } else {  // [y1, x1, y2, x2], either corner first
    e.x0 = hipep_nms_min(box[1], box[3]);
    e.x1 = hipep_nms_max(box[1], box[3]);
    e.y0 = hipep_nms_min(box[0], box[2]);
    e.y1 = hipep_nms_max(box[0], box[2]);
  }
  return e;
}

// Whether the kept box `a` suppresses the candidate `b` (their IoU above the threshold).
HIPEP_DEVICE bool hipep_nms_suppresses(const float* a_box, const float* b_box, int center, float iou_threshold) {
  const hipep_nms_extent a = hipep_nms_extents(a_box, center), b = hipep_nms_extents(b_box, center);
  const float ix0 = hipep_nms_max(a.x0, b.x0), ix1 = hipep_nms_min(a.x1, b.x1);
  if (ix1 <= ix0) return false;
  const float iy0 = hipep_nms_max(a.y0, b.y0), iy1 = hipep_nms_min(a.y1, b.y1);
  if (iy1 <= iy0) return false;
  const float inter = __fmul_rn(__fsub_rn(ix1, ix0), __fsub_rn(iy1, iy0));
  const float area_a = __fmul_rn(__fsub_rn(a.x1, a.x0), __fsub_rn(a.y1, a.y0));
  const float area_b = __fmul_rn(__fsub_rn(b.x1, b.x0), __fsub_rn(b.y1, b.y0));
  const float uni = __fsub_rn(__fadd_rn(area_a, area_b), inter);
  if (inter <= 0.0f || area_a <= 0.0f || area_b <= 0.0f || uni <= 0.0f) return false;
  return __fdiv_rn(inter, uni) > iou_threshold;
}

// Whether candidate j (score sj) comes before candidate i (score si).
HIPEP_DEVICE bool hipep_nms_before(float sj, int j, float si, int i) {
  if (si != si) return sj == sj || j < i;
  return sj > si || (sj == si && j < i);
}

HIPEP_DEVICE bool hipep_nms_candidate(float s, bool has_threshold, float threshold) {
  return !has_threshold || s > threshold;
}

// boxes [batches, boxes, 4], scores [batches, classes, boxes]; max_out, iou and score_threshold
// point at one value each, or are null where the node leaves the input out (then nothing is
// selected, the IoU threshold is 0, every score is a candidate).
HIPEP_KERNEL void hipep_nms(const float* HIPEP_RESTRICT boxes, const float* HIPEP_RESTRICT scores,
                            const hipep_i64* HIPEP_RESTRICT max_out, const float* HIPEP_RESTRICT iou,
                            const float* HIPEP_RESTRICT score_threshold, hipep_i64* HIPEP_RESTRICT y,
                            const hipep_nms_args a) {
  HIPEP_DYNAMIC_SHARED(int, smem);
  __shared__ int partial[HIPEP_MAX_WARPS];
  __shared__ int hit[3];
  const int n = (int)a.boxes;  // at most the binding's limit
  int* order = smem;
  int* kept = smem + n;
  const int t = threadIdx.x, threads = blockDim.x;
  const hipep_i64 requested = max_out != nullptr ? max_out[0] : 0;
  if (requested <= 0) return;
  const int limit = requested < a.boxes ? (int)requested : n;
  const float iou_threshold = iou != nullptr ? iou[0] : 0.0f;
  const bool has_threshold = score_threshold != nullptr;
  const float threshold = has_threshold ? score_threshold[0] : 0.0f;
  if (t < 3) hit[t] = 0;
  __syncthreads();

  hipep_i64 base = 0;  // rows of the pairs before
  unsigned step = 0;   // candidates looked at, over all pairs: picks the flag
  for (hipep_i64 pair = 0; pair < a.batches * a.classes; ++pair) {
    const hipep_i64 b = pair / a.classes, c = pair % a.classes;
    const float* s = scores + pair * n;
    const float* pair_boxes = boxes + b * n * 4;
    int mine = 0;
    for (int i = t; i < n; i += threads) {
      const float si = s[i];
      if (!hipep_nms_candidate(si, has_threshold, threshold)) continue;
      int rank = 0;
      for (int j = 0; j < n; ++j) {
        const float sj = s[j];
        rank += hipep_nms_candidate(sj, has_threshold, threshold) && hipep_nms_before(sj, j, si, i);
      }
      order[rank] = i;
      ++mine;
    }
    const int candidates = hipep_block_sum(mine, partial);
    __syncthreads();  // order complete (the sum has no barrier where the block is one warp)

    int count = 0;  // boxes kept for the pair: the same in every thread
    for (int r = 0; r < candidates && count < limit; ++r, ++step) {
      const int i = order[r];
      const float* box = pair_boxes + 4 * (hipep_i64)i;
      bool suppressed = false;
      for (int k = t; k < count && !suppressed; k += threads)
        suppressed = hipep_nms_suppresses(pair_boxes + 4 * (hipep_i64)kept[k], box, a.center, iou_threshold);
      if (suppressed) hit[step % 3] = 1;
      __syncthreads();
      suppressed = hit[step % 3] != 0;
      // The flag two steps on was read before this step's barrier and is set after the next one.
      if (t == 0) hit[(step + 2) % 3] = 0;
      if (!suppressed) {
        if (t == count % threads) {
          kept[count] = i;
          const hipep_i64 row = base + count;
          if (row < a.count) {
            y[3 * row] = b;
            y[3 * row + 1] = c;
            y[3 * row + 2] = i;
          }
        }
        ++count;
      }
    }
    base += count;
    __syncthreads();  // every thread is done with order before the next pair ranks into it
  }
}
