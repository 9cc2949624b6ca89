//! A set of a ROB's e-links by their index in the ROB (up to [`MAX_ROB_ELINKS`]).

pub const MAX_ROB_ELINKS: usize = 256;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ElinkSet([u64; MAX_ROB_ELINKS / 64]);

impl ElinkSet {
    /// The first `n` e-links.
    pub fn first(n: usize) -> Self {
        let mut s = Self::default();
        (0..n).for_each(|i| s.insert(i));
        s
    }

    #[inline(always)]
    pub fn insert(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }

    #[inline(always)]
    pub fn remove(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }

    #[inline(always)]
    pub fn contains(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }

    /// Whether every member of `other` is in `self`.
    #[inline(always)]
    pub fn covers(&self, other: &Self) -> bool {
        self.0.iter().zip(&other.0).all(|(a, b)| b & !a == 0)
    }

    /// Members of `self` that are not in `other`.
    pub fn minus(&self, other: &Self) -> Self {
        let mut out = *self;
        out.0.iter_mut().zip(&other.0).for_each(|(a, b)| *a &= !b);
        out
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }

    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..MAX_ROB_ELINKS).filter(|&i| self.contains(i))
    }

    /// The set as 32-bit words (bit `i % 32` of word `i / 32`), `words` of them.
    pub fn to_words(&self, words: usize) -> impl Iterator<Item = u32> + '_ {
        (0..words).map(|w| (self.0[w / 2] >> ((w % 2) * 32)) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_operations() {
        let all = ElinkSet::first(70);
        let mut got = ElinkSet::default();
        got.insert(3);
        got.insert(69);
        assert!(!got.covers(&all) && all.covers(&got));
        let missing = all.minus(&got);
        assert_eq!(missing.iter().count(), 68);
        assert!(!missing.contains(69) && missing.contains(68));
        let words: Vec<u32> = got.to_words(3).collect();
        assert_eq!(words, vec![1 << 3, 0, 1 << 5]);
        got.remove(3);
        got.remove(69);
        assert!(got.is_empty());
    }
}
