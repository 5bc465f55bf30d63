//! The two random number generators whose exact streams Samudra's samplers consume:
//! CPython's `random.Random(int)` (all of upstream's current samplers) and the torch CPU
//! generator's `randperm` (the older non-DDP order, `Order::ShuffleTorchRandperm04116bcd`).
//!
//! Both sit on MT19937; they differ in seeding and in how a bounded integer is drawn.

const N: usize = 624;
const M: usize = 397;

/// The 32-bit Mersenne Twister (MT19937).
#[derive(Clone)]
pub struct Mt19937 {
    state: [u32; N],
    index: usize,
}

impl std::fmt::Debug for Mt19937 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mt19937").field("index", &self.index).finish_non_exhaustive()
    }
}

impl Mt19937 {
    /// `init_genrand(seed)`: the seeding of C++ `std::mt19937(seed)` and of torch's CPU generator.
    pub fn new(seed: u32) -> Self {
        let mut state = [0u32; N];
        state[0] = seed;
        for i in 1..N {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32.wrapping_mul(prev ^ (prev >> 30)).wrapping_add(i as u32);
        }
        Self { state, index: N }
    }

    /// `init_by_array(key)`: the seeding CPython uses for `random.Random(int)`.
    pub fn from_key(key: &[u32]) -> Self {
        let mut mt = Self::new(19_650_218);
        let s = &mut mt.state;
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..N.max(key.len()) {
            let prev = s[i - 1];
            s[i] = (s[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_664_525)).wrapping_add(key[j]).wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                s[0] = s[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..N - 1 {
            let prev = s[i - 1];
            s[i] = (s[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                s[0] = s[N - 1];
                i = 1;
            }
        }
        s[0] = 0x8000_0000;
        mt
    }

    fn twist(&mut self) {
        const UPPER: u32 = 0x8000_0000;
        const LOWER: u32 = 0x7fff_ffff;
        for i in 0..N {
            let y = (self.state[i] & UPPER) | (self.state[(i + 1) % N] & LOWER);
            let mut next = self.state[(i + M) % N] ^ (y >> 1);
            if y & 1 != 0 {
                next ^= 0x9908_b0df;
            }
            self.state[i] = next;
        }
        self.index = 0;
    }

    /// The next 32-bit output (`genrand_uint32`).
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }
}

/// CPython's `random.Random`, for the integer-seeded `shuffle` that Samudra's samplers call.
#[derive(Debug, Clone)]
pub struct PyRandom {
    mt: Mt19937,
}

impl PyRandom {
    /// `random.Random(seed)` for a non-negative integer seed.
    pub fn new(seed: u64) -> Self {
        Self::from_u128(u128::from(seed))
    }

    /// `random.Random(seed)` for a non-negative integer seed below 2^128, such as Samudra's
    /// `seed + epoch` when it passes 2^64: CPython keys MT19937 with the seed's 32-bit words,
    /// least significant first, as many as the seed needs (one for 0).
    pub fn from_u128(seed: u128) -> Self {
        let words: [u32; 4] = std::array::from_fn(|i| (seed >> (32 * i)) as u32);
        let used = words.iter().rposition(|&w| w != 0).map_or(1, |i| i + 1);
        Self { mt: Mt19937::from_key(&words[..used]) }
    }

    /// `getrandbits(k)` for `1 ≤ k ≤ 32`.
    fn getrandbits(&mut self, k: u32) -> u32 {
        debug_assert!((1..=32).contains(&k));
        self.mt.next_u32() >> (32 - k)
    }

    /// `_randbelow(n)` (the `getrandbits` variant): uniform in `0..n` by rejection.
    pub fn randbelow(&mut self, n: usize) -> usize {
        if n <= 1 {
            return 0;
        }
        let n32 = u32::try_from(n).expect("om4 schedules hold fewer than 2^32 batches");
        let k = 32 - n32.leading_zeros();
        loop {
            let r = self.getrandbits(k);
            if r < n32 {
                return r as usize;
            }
        }
    }

    /// `shuffle(x)`: Fisher–Yates from the back, `j = randbelow(i + 1)`.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.randbelow(i + 1);
            items.swap(i, j);
        }
    }
}

/// torch's CPU generator (`torch.Generator().manual_seed(seed)`), enough of it for `randperm`.
#[derive(Debug, Clone)]
pub struct TorchGenerator {
    mt: Mt19937,
}

impl TorchGenerator {
    /// `torch.Generator().manual_seed(seed)`: MT19937 seeded with the low 32 bits.
    pub fn new(seed: u64) -> Self {
        Self { mt: Mt19937::new(seed as u32) }
    }

    /// `torch.randperm(n, generator=g)` on the CPU, for `n < 2^32 / 20`:
    /// start from the identity and, for `i` in `0..n-1`, swap `i` with `i + random() % (n − i)`.
    pub fn randperm(&mut self, n: usize) -> Vec<usize> {
        assert!(n < (u32::MAX / 20) as usize, "randperm of more than 2^32/20 samples is not supported");
        let mut perm: Vec<usize> = (0..n).collect();
        for i in 0..n.saturating_sub(1) {
            let z = self.mt.next_u32() as usize % (n - i);
            perm.swap(i, i + z);
        }
        perm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mt19937_reference_outputs() {
        // The 10000th output of std::mt19937 with the default seed 5489 is 4123659995 (C++ standard).
        let mut mt = Mt19937::new(5489);
        let mut last = 0;
        for _ in 0..10_000 {
            last = mt.next_u32();
        }
        assert_eq!(last, 4_123_659_995);
        // init_by_array({0x123, 0x234, 0x345, 0x456}): first output of the reference mt19937ar.c test.
        let mut mt = Mt19937::from_key(&[0x123, 0x234, 0x345, 0x456]);
        assert_eq!(mt.next_u32(), 1_067_595_299);
    }

    #[test]
    fn python_random_getrandbits() {
        // python3 -c "import random; r=random.Random(42); print([r.getrandbits(32) for _ in range(3)])"
        let mut r = PyRandom::new(42);
        let got: Vec<u32> = (0..3).map(|_| r.getrandbits(32)).collect();
        assert_eq!(got, [2_746_317_213, 478_163_327, 107_420_369]);
    }

    #[test]
    fn python_random_shuffle() {
        // python3 -c "import random; x=list(range(10)); random.Random(15).shuffle(x); print(x)"
        let mut x: Vec<usize> = (0..10).collect();
        PyRandom::new(15).shuffle(&mut x);
        assert_eq!(x, PYTHON_SHUFFLE_15);
    }

    #[test]
    fn python_random_big_seeds() {
        // python3 -c "import random; print([random.Random(s).getrandbits(32) for s in (2**32, 2**64 + 2, 2**100 + 7)])"
        let got: Vec<u32> = [1u128 << 32, (1u128 << 64) + 2, (1u128 << 100) + 7]
            .iter()
            .map(|&s| PyRandom::from_u128(s).getrandbits(32))
            .collect();
        assert_eq!(got, PYTHON_BIG_SEEDS);
        assert_eq!(PyRandom::new(1 << 32).getrandbits(32), PYTHON_BIG_SEEDS[0]);
    }

    const PYTHON_SHUFFLE_15: [usize; 10] = [5, 9, 2, 4, 7, 6, 1, 8, 0, 3];
    const PYTHON_BIG_SEEDS: [u32; 3] = [485_306_839, 4_088_988_166, 1_786_885_132];
}
