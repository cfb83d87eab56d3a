//! Accessors for bit fields of typed registers (`struct Reg(pub u64)`), so every MSR type names
//! its fields the same way.

/// `reg_flag!(getter, setter, bit, "doc")`: a one-bit field.
#[macro_export]
macro_rules! reg_flag {
    ($get:ident, $set:ident, $bit:expr, $doc:expr) => {
        #[doc = $doc]
        pub fn $get(self) -> bool {
            self.0 & (1u64 << $bit) != 0
        }
        #[doc = $doc]
        pub fn $set(&mut self, on: bool) -> &mut Self {
            if on {
                self.0 |= 1u64 << $bit;
            } else {
                self.0 &= !(1u64 << $bit);
            }
            self
        }
    };
}

/// `reg_field!(getter, setter, lowest bit, width, "doc")`: a multi-bit field read as u8.
#[macro_export]
macro_rules! reg_field {
    ($get:ident, $set:ident, $lo:expr, $width:expr, $doc:expr) => {
        #[doc = $doc]
        pub fn $get(self) -> u8 {
            ((self.0 >> $lo) & ((1u64 << $width) - 1)) as u8
        }
        #[doc = $doc]
        /// Values wider than the field are truncated to it.
        pub fn $set(&mut self, v: u8) -> &mut Self {
            let mask = ((1u64 << $width) - 1) << $lo;
            self.0 = (self.0 & !mask) | ((u64::from(v) << $lo) & mask);
            self
        }
    };
}

