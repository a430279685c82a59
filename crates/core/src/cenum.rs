//! Rust mirrors of C enums shared with BPF programs, checked by the compiler.
//!
//! [`c_enum!`](crate::c_enum) declares a Rust enum whose discriminants are
//! the values of the C enum as the skeleton generator read them from BTF,
//! so no number is written twice; the build fails if the Rust enum does not
//! list the values from 0 in order, or (with `max NAME`) misses any below
//! the C enum's `..._MAX`.
//!
//! `c_enum! { pub enum Reason: types::xnf_router_reason, max XNF_R_MAX {
//! Forwarded = XNF_R_FORWARDED => "forwarded", ... } }` declares `Reason`
//! with `ALL` (in value order), `name()` and `from_u32()`.

#[macro_export]
macro_rules! c_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident : $c:ty, max $max:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $cconst:ident => $text:literal, )*
        }
    ) => {
        $crate::c_enum! {
            $(#[$meta])*
            $vis enum $name : $c {
                $( $(#[$vmeta])* $variant = $cconst => $text, )*
            }
        }
        const _: () = assert!(
            <$c>::$max.0 as usize == $name::ALL.len(),
            concat!(stringify!($name), ": the C enum has values the Rust enum lacks")
        );
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident : $c:ty {
            $( $(#[$vmeta:meta])* $variant:ident = $cconst:ident => $text:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u32)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant = <$c>::$cconst.0, )*
        }

        impl $name {
            /// Every value, in the order of their numbers (0, 1, ...).
            pub const ALL: [$name; [$(stringify!($variant)),*].len()] = [$($name::$variant),*];

            /// The name operators see.
            pub fn name(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )*
                }
            }

            /// The value of number `v`, if the C enum has one.
            pub fn from_u32(v: u32) -> Option<Self> {
                Self::ALL.get(v as usize).copied()
            }
        }

        const _: () = {
            let mut i = 0;
            while i < $name::ALL.len() {
                assert!($name::ALL[i] as usize == i, concat!(stringify!($name), ": values out of order or with gaps"));
                i += 1;
            }
        };
    };
}
