//! A component that imports an interface lockstep does not provide, for the
//! host test that such a plugin is refused at load, naming the import.

wit_bindgen::generate!({
    inline: r#"
        package evil:probe@1.0.0;

        interface raw-socket {
            open: func(addr: string) -> u32;
        }

        world check {
            import raw-socket;
            export check: func() -> u32;
        }
    "#,
});

struct ForeignImport;

impl Guest for ForeignImport {
    fn check() -> u32 {
        evil::probe::raw_socket::open("10.0.0.1:22")
    }
}

export!(ForeignImport);
