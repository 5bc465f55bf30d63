# Sourced by scripts/gpu-check/run.sh inside run(): its variables (work, carry, log, dev, model,
# grid, python, torch_device, torch_grid, cpu) and the table helpers of limits.sh are in scope.
# c, continued: v2 at 1° (hist 1, 4 steps, batch 1 and 4, and 4 in bf16).
"$work/bin/om4" synth "$work/1deg" --grid "$grid" --times 20 > "$log/synth.txt" 2>&1
for run in 1 4 "4 --bf16"; do
  batch=${run%% *} extra=${run#"$batch"}
  tag=${extra// /}
  (nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 || true) > "$log/mem-$batch.txt" 2>/dev/null &
  smi=$!
  part 240 "$work/bin/om4-train" train --device "$dev" --store "$work/1deg/OM4.zarr" --model "$model" --history 1 \
    --steps 4 --batch-size "$batch" --epochs 1 $extra > "$log/v2-b$batch$tag.txt" 2>&1
  status=$?
  kill "$smi" 2>/dev/null
  peak=$(sort -n "$log/mem-$batch.txt" | tail -1)
  line=$(grep -E '^epoch' "$log/v2-b$batch$tag.txt" | tail -1)
  first=$(grep -oE 'first batch .*' "$log/v2-b$batch$tag.txt" | tail -1)
  if [ "$status" = 0 ] && [ -n "$line" ]; then
    row "c. $model $grid steps 4 batch $batch$extra" INFO "${line#epoch   1: } peak ${peak} MiB; $first"
  else fail "c. $model $grid steps 4 batch $batch$extra" "$status" "exit $status: $(tail -2 "$log/v2-b$batch$tag.txt" | tr '\n' ' ')"; fi
done
