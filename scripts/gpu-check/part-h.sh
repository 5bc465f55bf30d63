# Sourced by scripts/gpu-check/run.sh inside run(): its variables (work, carry, log, dev, model,
# grid, python, torch_device, torch_grid, cpu) and the table helpers of limits.sh are in scope.
# h: the Python wheel on the GPU, in its own site (upstream's loader stack at its pins).
pysite="$work/pysite" up="$work/samudra-loader"
mkdir -p "$up" && untar "$carry/samudra-loader.tar.xz" "$up"
"$python" -m pip install -q --no-index --no-deps --no-compile --target "$pysite" "$carry"/wheels/*.whl "$carry"/wheels-py/*.whl
cp scripts/gpu/sitecustomize.py "$pysite/"
pyenv=(env PYTHONPATH="$pysite:$up/src" OM4_REQUIRE_GPU=1)
# test_torch.py on the GPU: the device path and the resident split equal the host path bit for
# bit with batches pinned, copied and prepared there.
if part 120 "${pyenv[@]}" OM4_TORCH_DEVICE="$torch_device" "$python" -m pytest -q -p no:cacheprovider \
  crates/om4-python/tests/test_loader.py crates/om4-python/tests/test_readers.py \
  crates/om4-python/tests/test_torch.py > "$log/py-om4.txt" 2>&1; then
  row "h. om4 wheel suite, pin_memory" PASS "$(tail -1 "$log/py-om4.txt")"
else fail "h. om4 wheel suite, pin_memory" "$?" "$(tail -3 "$log/py-om4.txt" | tr '\n' ' ')"; fi
if (cd "$up" && part 120 "${pyenv[@]}" "$python" -m pytest -q -p no:cacheprovider -o addopts='' \
  tests/test_rust_data.py -m cuda) > "$log/py-upstream-cuda.txt" 2>&1; then
  row "h. upstream's CUDA cases on om4" PASS "$(tail -1 "$log/py-upstream-cuda.txt")"
else fail "h. upstream's CUDA cases on om4" "$?" "$(tail -3 "$log/py-upstream-cuda.txt" | tr '\n' ' ')"; fi
"$work/bin/om4" synth "$work/py1deg" --grid "$grid" --times 60 > "$log/py-synth.txt" 2>&1
# The small case (21 + 3 channels, 2 steps), then Samudra v2's settings (77 + 3, 4 steps).
for case in "small:--levels 5 --steps 2 --rounds 3" "v2:--levels 19 --steps 4 --rounds 2"; do
  name=${case%%:*}
  # shellcheck disable=SC2086
  out=$(part 150 "${pyenv[@]}" "$python" benches/python/loader.py --upstream-src "$up" --patch-store \
    --device "$torch_device" --threads 8 --batches 4 --compute-ms 100 --train 1958-01-03..1958-08-01 \
    --val 1958-08-06..1958-09-20 ${case#*:} --json "$log/py-loader-gpu-$name.json" "$work/py1deg" \
    2> "$log/py-loader-gpu-$name.txt")
  status=$?
  echo "$out" >> "$log/py-loader-gpu-$name.txt"
  if [ "$status" = 0 ] && ! grep -q "bit for bit: False" "$log/py-loader-gpu-$name.txt"; then
    row "h. loader $name on $torch_device: first batches" PASS "$(grep -c 'bit for bit: True' "$log/py-loader-gpu-$name.txt") arrays equal upstream's bit for bit"
    while IFS= read -r line; do
      case "$line" in loader*|upstream*|om4*) row "h. loader $name on $torch_device" INFO "$line";; esac
    done <<< "$out"
  else fail "h. loader $name on $torch_device" "$status" "exit $status: $(tail -2 "$log/py-loader-gpu-$name.txt" | tr '\n' ' ')"; fi
done
