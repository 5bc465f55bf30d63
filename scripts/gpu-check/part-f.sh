# Sourced by scripts/gpu-check/run.sh inside run(): its variables (work, carry, log, dev, model,
# grid, python, torch_device, torch_grid, cpu) and the table helpers of limits.sh are in scope.
# f: the Vulkan build trains the demo (the loader from the carried Debian package).
if [ "$dev" != cpu ]; then
  for f in "$carry"/gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
if [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
vdev=vulkan
if [ "$dev" = cpu ]; then vdev=cpu; fi
if [ -z "$cpu" ]; then  # the CPU reference, from the Vulkan build when part c did not run
  part 300 "$work/bin/om4-train-vulkan" train --device cpu --epochs 2 > "$log/demo-cpu.txt" 2>&1
  cpu=$(losses "$log/demo-cpu.txt")
fi
if part 240 "$work/bin/om4-train-vulkan" train --device "$vdev" --epochs 2 > "$log/demo-vulkan.txt" 2>&1 &&
  vk=$(losses "$log/demo-vulkan.txt") && close "$vk" "$cpu"; then
  row "f. demo on $vdev (vulkan build)" PASS "train loss $vk/ cpu $cpu(1e-3 rel.)"
else fail "f. demo on $vdev (vulkan build)" "$?" "$(tail -2 "$log/demo-vulkan.txt" | tr '\n' ' ')"; fi
